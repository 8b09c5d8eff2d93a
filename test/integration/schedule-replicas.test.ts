// A seconds-field schedule on two replicas of one Postgres for about ten seconds: whichever replica
// gets to a due time first fires it, and every due time has exactly one job, each with its own
// idempotency key. Postgres only: replicas share one database. New routes: fails on the code
// before schedules.
import { describe, expect, it } from "vitest";
import { sql } from "kysely";
import { createRestClient } from "../support/clients.js";
import { jobBody } from "../support/actors.js";
import { databaseKind } from "../support/database.js";
import { useReplicaPair } from "../support/fixture.js";

const pair = useReplicaPair();

describe.skipIf(databaseKind !== "postgres")("schedules across two replicas (postgres)", () => {
  it("*/2 * * * * * for ~10 s: one job per due time, every key distinct", async () => {
    const admin = createRestClient(
      pair.a.url,
      pair.a.pki.ca.certPem,
      await pair.a.pki.service("test-admin"),
    );
    const { workspaceId: _w, apiVersion: _a, ...job } = jobBody();
    const created = await admin.request("POST", "/v1/admin/schedules", {
      apiVersion: "v1",
      name: "every-two-seconds",
      workspaceId: "wrep",
      cron: "*/2 * * * * *",
      timeZone: "UTC",
      job,
    });
    expect(created.status, created.text).toBe(200);
    const id: string = created.json.schedule.id;
    await new Promise((r) => setTimeout(r, 10_500));
    const paused = await admin.request("POST", `/v1/admin/schedules/${id}/pause`, {
      apiVersion: "v1",
    });
    expect(paused.status, paused.text).toBe(200);
    await admin.close();

    const db = pair.a.plane.store.db;
    const fires = await db
      .selectFrom("schedule_fires")
      .selectAll()
      .where("schedule_id", "=", id)
      .orderBy("due_at")
      .execute();
    const { rows: jobs } = await sql<{ id: string; idempotency_key: string }>`
      select id, idempotency_key from jobs where workspace_id = 'wrep'`.execute(db);
    // About five due times in ten seconds; each one fired on time, in order, 2 s apart.
    expect(fires.length).toBeGreaterThanOrEqual(4);
    const dues = fires.map((f) => new Date(f.due_at).getTime());
    for (let i = 1; i < dues.length; i++) expect(dues[i]! - dues[i - 1]!).toBe(2000);
    for (const f of fires) expect(f).toMatchObject({ cause: "due", outcome: "enqueued" });
    // Exactly one job per due time, keyed by schedule and due time, none without its fire.
    expect(jobs).toHaveLength(fires.length);
    expect(new Set(jobs.map((j) => j.idempotency_key)).size).toBe(jobs.length);
    expect(new Set(fires.map((f) => f.job_id))).toEqual(new Set(jobs.map((j) => j.id)));
    for (const f of fires)
      expect(f.idempotency_key).toBe(`schedule:${id}:${new Date(f.due_at).toISOString()}`);
  });
});
