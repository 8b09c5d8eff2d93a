import "reflect-metadata";
import { randomBytes, randomUUID } from "node:crypto";
import { beforeAll, describe, expect, it } from "vitest";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";

const cp = useControlPlane();
const { admin } = cp;

const second = 1000;
const day = 86_400 * second;

interface SeedLease {
  readonly runner: string;
  /** Seconds before the job's settlement. */
  readonly issued: number;
  readonly ended: number;
  readonly reason: "settled" | "expired" | "timed_out";
}

interface SeedJob {
  readonly workspace: string;
  readonly state: "succeeded" | "failed" | "cancelled";
  readonly settledAt: Date;
  /** Seconds before the settlement. */
  readonly created: number;
  readonly leases: readonly SeedLease[];
  readonly errorCode?: string;
  readonly failureReason?: string;
}

/**
 * Inserts a settled job and its leases with the given timestamps, as the broker would have left
 * them.
 */
async function seed(job: SeedJob): Promise<void> {
  const db = cp.plane.store.db;
  const id = randomUUID();
  const at = (secondsBefore: number) => new Date(job.settledAt.getTime() - secondsBefore * second);
  await db
    .insertInto("jobs")
    .values({
      id,
      workspace_id: job.workspace,
      labels: ["linux"],
      kind: "command",
      spec: JSON.stringify({ image: "busybox", argv: ["true"] }),
      state: job.state,
      priority: 0,
      attempts: job.leases.length,
      max_attempts: 3,
      request_sha256: "seed",
      error: job.errorCode
        ? JSON.stringify({ code: job.errorCode, message: "seeded", retryable: false })
        : null,
      failure_reason: job.failureReason ?? null,
      created_at: at(job.created),
      updated_at: job.settledAt,
      settled_at: job.settledAt,
    })
    .execute();
  for (const [i, l] of job.leases.entries()) {
    await db
      .insertInto("leases")
      .values({
        token_sha256: randomBytes(32),
        job_id: id,
        workspace_id: job.workspace,
        runner_id: l.runner,
        attempt: i + 1,
        issued_at: at(l.issued),
        expires_at: at(l.ended - 30),
        ended_at: at(l.ended),
        end_reason: l.reason,
      })
      .execute();
  }
}

const now = Date.now();
const recent = new Date(now - 3600 * second); // settled an hour ago
const tenDays = new Date(now - 10 * day);
const fortyDays = new Date(now - 40 * day);

beforeAll(async () => {
  // st1, an hour ago: waits 10/20/30/40 s, runs 90/40/70/60 s.
  await seed({
    workspace: "st1",
    state: "succeeded",
    settledAt: recent,
    created: 100,
    leases: [{ runner: "r1", issued: 90, ended: 0, reason: "settled" }],
  });
  await seed({
    workspace: "st1",
    state: "succeeded",
    settledAt: recent,
    created: 100,
    leases: [
      { runner: "r1", issued: 80, ended: 50, reason: "expired" },
      { runner: "r2", issued: 40, ended: 0, reason: "settled" },
    ],
  });
  await seed({
    workspace: "st1",
    state: "failed",
    settledAt: recent,
    created: 100,
    errorCode: "exit_code",
    leases: [{ runner: "r2", issued: 70, ended: 0, reason: "settled" }],
  });
  await seed({
    workspace: "st1",
    state: "failed",
    settledAt: recent,
    created: 100,
    errorCode: "timeout",
    failureReason: "timeout",
    leases: [{ runner: "r1", issued: 60, ended: 0, reason: "timed_out" }],
  });
  await seed({
    workspace: "st1",
    state: "cancelled",
    settledAt: recent,
    created: 100,
    failureReason: "cancelled",
    leases: [],
  });
  // st2, ten days ago: wait 2 s, run 3 s.
  await seed({
    workspace: "st2",
    state: "succeeded",
    settledAt: tenDays,
    created: 5,
    leases: [{ runner: "r3", issued: 3, ended: 0, reason: "settled" }],
  });
  // st1, forty days ago: a lost job.
  await seed({
    workspace: "st1",
    state: "failed",
    settledAt: fortyDays,
    created: 10,
    failureReason: "lease_lost",
    leases: [{ runner: "r1", issued: 8, ended: 1, reason: "expired" }],
  });
});

async function stats(query: string) {
  const reply = await admin.rest.request("GET", `/v1/admin/stats?${query}`);
  expect(reply.status, reply.text).toBe(200);
  return reply.json as { since: string; until: string; workspaces: Array<Record<string, unknown>> };
}

/** The hour-old st1 history, as the stats must report it. */
const recentSt1 = {
  workspaceId: "st1",
  jobs: "5",
  byState: [
    { key: "cancelled", count: "1" },
    { key: "failed", count: "2" },
    { key: "succeeded", count: "2" },
  ],
  byErrorCode: [
    { key: "exit_code", count: "1" },
    { key: "timeout", count: "1" },
  ],
  attempts: "5",
  leaseLosses: "1",
  timeouts: "1",
  cancels: "1",
  // percentile_cont over 10, 20, 30, 40: the median between 20 and 30, p95 at 2.85 of 3 steps.
  wait: { count: "4", p50Seconds: 25, p95Seconds: 38.5, maxSeconds: 40 },
  run: { count: "4", p50Seconds: 65, p95Seconds: 87, maxSeconds: 90 },
  runners: [
    { runnerId: "r1", jobs: "3", busySeconds: 180 },
    { runnerId: "r2", jobs: "2", busySeconds: 110 },
  ],
};

const st2 = {
  workspaceId: "st2",
  jobs: "1",
  byState: [{ key: "succeeded", count: "1" }],
  attempts: "1",
  wait: { count: "1", p50Seconds: 2, p95Seconds: 2, maxSeconds: 2 },
  run: { count: "1", p50Seconds: 3, p95Seconds: 3, maxSeconds: 3 },
  runners: [{ runnerId: "r3", jobs: "1", busySeconds: 3 }],
};

describe(`GET /v1/admin/stats (${databaseKind})`, () => {
  it(
    "since as a duration in minutes (90m) covers the last hour's jobs: " +
      "counts, error codes and exact percentiles per workspace and runner",
    async () => {
      const reply = await stats("since=90m");
      expect(reply.workspaces).toEqual([recentSt1]);
      expect(Date.parse(reply.until) - Date.parse(reply.since)).toBe(90 * 60 * second);
    },
  );

  it("since as hours (720h) and as days (30d) cover the same 30 days", async () => {
    for (const since of ["720h", "30d"]) {
      const reply = await stats(`since=${since}`);
      expect(reply.workspaces, since).toEqual([recentSt1, st2]);
    }
  });

  it("since as RFC 3339 and as Unix seconds is that moment", async () => {
    const twoHoursAgo = new Date(now - 2 * 3600 * second);
    expect((await stats(`since=${twoHoursAgo.toISOString()}`)).workspaces).toEqual([recentSt1]);
    const fiftyDaysAgo = Math.floor((now - 50 * day) / 1000);
    const reply = await stats(`since=${fiftyDaysAgo}`);
    expect(Date.parse(reply.since)).toBe(fiftyDaysAgo * 1000);
    expect(reply.workspaces.map((w) => [w.workspaceId, w.jobs, w.leaseLosses])).toEqual([
      ["st1", "6", "2"],
      ["st2", "1", undefined],
    ]);
  });

  it("the default window is the last 24 hours, and until and workspaceId narrow it", async () => {
    expect((await stats("")).workspaces).toEqual([recentSt1]);
    expect((await stats("since=30d&workspaceId=st2")).workspaces).toEqual([st2]);
    const old = await stats("since=50d&until=20d");
    expect(old.workspaces).toEqual([
      expect.objectContaining({
        workspaceId: "st1",
        jobs: "1",
        byErrorCode: [{ key: "lease_lost", count: "1" }],
        leaseLosses: "1",
        wait: { count: "1", p50Seconds: 2, p95Seconds: 2, maxSeconds: 2 },
      }),
    ]);
  });

  it("a since in no accepted form is refused with 400 naming the forms and an example", async () => {
    const reply = await admin.rest.request("GET", "/v1/admin/stats?since=yesterday");
    expect(reply.status).toBe(400);
    expect(reply.json.code).toBe("invalid_argument");
    expect(reply.json.message).toMatch(
      /^since "yesterday" is not a time; use RFC 3339 \("2026-11-29T09:30:00Z"\), Unix seconds .*"720h".*"30d"/,
    );
    const backwards = await admin.rest.request("GET", "/v1/admin/stats?since=1h&until=2h");
    expect(backwards.status).toBe(400);
    expect(backwards.json.message).toMatch(/^until \(.*\) is before since/);
    const badWorkspace = await admin.rest.request("GET", "/v1/admin/stats?workspaceId=a%20b");
    expect(badWorkspace.status).toBe(400);
  });
});
