// Missed fires: schedules whose due times passed while no control plane ran get their missedRuns
// policy applied, exactly, when one starts. The control plane is stopped, the schedules' clocks
// are moved back as if it had been down for hours (next_run_at hours ago, written while no server
// runs), and a new control plane starts on the same database. New routes and tables: fails on the
// code before schedules.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sql } from "kysely";
import { openStore } from "../../src/store/database.js";
import { adminActor, eventually, jobBody } from "../support/actors.js";
import { startTestControlPlane, type TestControlPlane } from "../support/control-plane.js";
import { createTestDatabase, databaseKind, type TestDatabase } from "../support/database.js";

let dir: string;
let database: TestDatabase;
let plane: TestControlPlane | undefined;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "forelead-schedules-"));
  database =
    databaseKind === "embedded"
      ? { location: join(dir, "db"), kind: "embedded", drop: async () => {} }
      : await createTestDatabase();
});
afterAll(async () => {
  await plane?.close();
  await database.drop();
  await rm(dir, { recursive: true, force: true });
});

const hour = 3600_000;
const { workspaceId: _w, apiVersion: _a, ...job } = jobBody();

interface FireRow {
  schedule_id: string;
  due_at: Date;
  cause: string;
  outcome: string;
  job_id: string | null;
  idempotency_key: string | null;
}

describe(`missed fires (${databaseKind})`, () => {
  it(
    "skip, runOnce and all (bounded at 100) apply exactly when a control plane starts",
    { timeout: 120_000 },
    async () => {
      plane = await startTestControlPlane({ database });
      const admin = await adminActor(plane);
      // Three due times, 4, 3 and 2 hours before now (whole hours, UTC): all long missed, none due
      // again until tomorrow.
      const top = Math.floor(Date.now() / hour) * hour;
      const missed = [4, 3, 2].map((k) => new Date(top - k * hour));
      const cron = `0 ${missed.map((t) => t.getUTCHours()).join(",")} * * *`;
      const ids: Record<string, string> = {};
      for (const policy of ["skip", "runOnce", "all"]) {
        const reply = await admin.rest.request("POST", "/v1/admin/schedules", {
          apiVersion: "v1",
          name: `missed-${policy}`,
          workspaceId: "wmiss",
          cron,
          timeZone: "UTC",
          missedRuns: policy,
          job,
        });
        expect(reply.status, reply.text).toBe(200);
        ids[policy] = reply.json.schedule.id;
      }
      // Every minute, paused while the control plane runs: its 180 due times over the outage are
      // more than the bound of `all`.
      const bounded = await admin.rest.request("POST", "/v1/admin/schedules", {
        apiVersion: "v1",
        name: "missed-bounded",
        workspaceId: "wmiss",
        cron: "* * * * *",
        timeZone: "UTC",
        missedRuns: "all",
        job,
      });
      ids["bounded"] = bounded.json.schedule.id;
      await admin.rest.request("POST", `/v1/admin/schedules/${ids["bounded"]}/pause`, {
        apiVersion: "v1",
      });
      await admin.close();
      await plane.close();
      plane = undefined;

      // While no control plane runs: the schedules were due hours ago.
      const store = await openStore(database.location);
      await store.db
        .updateTable("schedules")
        .set({ next_run_at: missed[0]! })
        .where("id", "in", [ids["skip"]!, ids["runOnce"]!, ids["all"]!])
        .execute();
      await store.db
        .updateTable("schedules")
        .set({ next_run_at: new Date(top - 3 * hour), paused_at: null, paused_by: null })
        .where("id", "=", ids["bounded"]!)
        .execute();
      await store.close();

      plane = await startTestControlPlane({ database });
      const db = plane.plane.store.db;
      const startedAt = Date.now();
      await eventually(
        "every schedule ticked",
        async () => {
          const { rows } = await sql<{ n: string }>`
            select count(*) as n from schedules where next_run_at > now()`.execute(db);
          return Number(rows[0]!.n) === 4 ? true : undefined;
        },
        30_000,
        100,
      );
      const fires = await db
        .selectFrom("schedule_fires")
        .select(["schedule_id", "due_at", "cause", "outcome", "job_id", "idempotency_key"])
        .orderBy("due_at")
        .execute();
      const of = (policy: string) =>
        fires
          .filter((f) => f.schedule_id === ids[policy])
          .map((f: FireRow) => ({
            due: new Date(f.due_at).toISOString(),
            cause: f.cause,
            outcome: f.outcome,
            job: f.job_id !== null,
          }));
      const expected = (outcomes: string[]) =>
        missed.map((t, i) => ({
          due: t.toISOString(),
          cause: "missed",
          outcome: outcomes[i],
          job: outcomes[i] === "enqueued",
        }));
      expect(of("skip")).toEqual(expected(["skipped_missed", "skipped_missed", "skipped_missed"]));
      expect(of("runOnce")).toEqual(expected(["skipped_missed", "skipped_missed", "enqueued"]));
      expect(of("all")).toEqual(expected(["enqueued", "enqueued", "enqueued"]));

      // `all` over 180 missed minutes: the newest 100, one a minute, the last within the last
      // lateness window before the start.
      const bound = fires.filter((f) => f.schedule_id === ids["bounded"] && f.cause === "missed");
      expect(bound).toHaveLength(100);
      expect(bound.every((f) => f.outcome === "enqueued")).toBe(true);
      const dues = bound.map((f) => new Date(f.due_at).getTime());
      for (let i = 1; i < dues.length; i++) expect(dues[i]! - dues[i - 1]!).toBe(60_000);
      expect(startedAt - dues.at(-1)!).toBeLessThan(80_000);

      // Every fired job exists once, keyed by its schedule and due time.
      const fired = fires.filter((f) => f.job_id !== null);
      expect(new Set(fired.map((f) => f.idempotency_key)).size).toBe(fired.length);
      const { rows: jobs } = await sql<{ n: string }>`
        select count(*) as n from jobs where workspace_id = 'wmiss'`.execute(db);
      expect(Number(jobs[0]!.n)).toBe(fired.length);
      for (const f of fired)
        expect(f.idempotency_key).toBe(
          `schedule:${f.schedule_id}:${new Date(f.due_at).toISOString()}`,
        );

      // The skipped ones are one schedule.missed event; each fire a schedule.fired event.
      const { rows: events } = await sql<{ type: string; data: Record<string, unknown> }>`
        select type, data from events where type like 'schedule.%' order by id`.execute(db);
      const missedEvents = events.filter((e) => e.type === "schedule.missed");
      expect(new Map(missedEvents.map((e) => [e.data["scheduleId"], e.data["skipped"]]))).toEqual(
        new Map([
          [ids["skip"], 3],
          [ids["runOnce"], 2],
        ]),
      );
      expect(events.filter((e) => e.type === "schedule.fired")).toHaveLength(fired.length);
    },
  );
});
