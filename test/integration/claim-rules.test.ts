import "reflect-metadata";
import { randomBytes } from "node:crypto";
import { sql } from "kysely";
import { describe, expect, it } from "vitest";
import { eventually, registeredRunner, type RunnerActor } from "../support/actors.js";
import { createRestClient, type RestReply } from "../support/clients.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";
import { specFor, startTestRunner } from "../support/runner-agent.js";

// What a claim may lease (issues 20 and 21): later (runAt, delaySeconds), after a retry's backoff,
// within a concurrency group's limit, and only to a runner meeting the job's requirements.
const cp = useControlPlane();
const { admin } = cp;

/** Enqueues; the reply must be 200 and queued. */
/**
 * Enqueues in `workspaceId`; the job is queued, or with `handoff`, may be running already (leased
 * to a claim that was waiting).
 */
async function enqueue(
  workspaceId: string,
  overrides: Record<string, unknown> = {},
  handoff = false,
) {
  const reply = await admin.enqueue({ workspaceId, ...overrides });
  expect(reply.status, reply.text).toBe(200);
  expect(handoff ? ["queued", "running"] : ["queued"]).toContain(reply.json.job.state);
  return reply.json.job as RestReply["json"];
}

async function getJob(jobId: string) {
  const reply = await admin.job(jobId);
  expect(reply.status, reply.text).toBe(200);
  return reply.json.job as RestReply["json"];
}

/** The database's time of the lease the job's current attempt was issued (leases.issued_at). */
async function issuedAt(jobId: string): Promise<number> {
  const row = await cp.plane.store.db
    .selectFrom("leases")
    .select("issued_at")
    .where("job_id", "=", jobId)
    .orderBy("id", "desc")
    .executeTakeFirstOrThrow();
  return new Date(row.issued_at).getTime();
}

/** Fails the leased job retryably; returns the complete reply's job. */
async function failRetryably(runner: RunnerActor, jobId: string, token: string, attempt: number) {
  const reply = await runner.complete(jobId, token, {
    completionId: `fail-${jobId}-${attempt}`,
    outcome: "failed",
    exitCode: 1,
    error: { code: "flaky", message: "try again", retryable: true },
  });
  expect(reply.status, reply.text).toBe(200);
  return reply.json.job as RestReply["json"];
}

describe(`what a claim may lease (${databaseKind})`, () => {
  it("runAt: not claimed before it; an already-waiting long-poll claim takes it when it falls due", async () => {
    const runner = await registeredRunner(cp, "sched-1", "sched");
    const runAt = new Date(Date.now() + 3_000);
    const job = await enqueue("sched", { runAt: runAt.toISOString() });
    expect(job.claimableAt).toBe(runAt.toISOString());
    expect(job.waiting).toEqual({
      code: "scheduled",
      until: runAt.toISOString(),
      message: `the job is scheduled: it is claimable from ${runAt.toISOString()} (its runAt or delaySeconds)`,
    });
    const early = await runner.claim({ waitSeconds: 0 });
    expect(early.status, early.text).toBe(204);
    // One long-poll, sent before the job is due: no enqueue or completion comes to wake it, so only
    // the due timer can end its wait with this job before its 20 s are over (it would answer 204).
    const sentAt = Date.now();
    expect(sentAt).toBeLessThan(runAt.getTime());
    const waited = await runner.claim({ waitSeconds: 20 });
    expect(waited.status, waited.text).toBe(200);
    expect(waited.json.job.id).toBe(job.id);
    expect(await issuedAt(job.id)).toBeGreaterThanOrEqual(runAt.getTime());
    expect((await getJob(job.id)).claimableAt).toBeUndefined(); // shown while queued
  });

  it("delaySeconds: claimable that many seconds after the enqueue", async () => {
    const runner = await registeredRunner(cp, "delay-1", "delay");
    const job = await enqueue("delay", { delaySeconds: 2 });
    expect(Date.parse(job.claimableAt) - Date.parse(job.createdAt)).toBe(2_000);
    expect(job.waiting).toMatchObject({ code: "scheduled", until: job.claimableAt });
    expect((await runner.claim({ waitSeconds: 0 })).status).toBe(204);
    const waited = await runner.claim({ waitSeconds: 20 });
    expect(waited.status, waited.text).toBe(200);
    expect(waited.json.job.id).toBe(job.id);
    expect(await issuedAt(job.id)).toBeGreaterThanOrEqual(Date.parse(job.claimableAt));
  });

  it("backoff: each retry is claimable later by the multiplier, capped; a lost lease backs off too", async () => {
    const runner = await registeredRunner(cp, "backoff-1", "backoff");
    const job = await enqueue("backoff", {
      maxAttempts: 5,
      backoff: { initialSeconds: 0.5, multiplier: 2, maxSeconds: 1.5 },
    });
    expect(job.backoff).toEqual({ initialSeconds: 0.5, multiplier: 2, maxSeconds: 1.5 });
    const delays: number[] = [];
    for (let attempt = 1; attempt <= 3; attempt++) {
      const claim = await runner.claim({ waitSeconds: 20 });
      expect(claim.status, claim.text).toBe(200);
      expect(claim.json.job.id).toBe(job.id);
      const requeued = await failRetryably(runner, job.id, claim.json.token, attempt);
      expect(requeued).toMatchObject({ state: "queued", attempts: attempt });
      // Both times are the database's now() of the completing statement.
      delays.push(Date.parse(requeued.claimableAt) - Date.parse(requeued.updatedAt));
      const view = await getJob(job.id);
      if (Date.parse(view.claimableAt) > Date.now())
        expect(view.waiting).toMatchObject({ code: "backoff", until: requeued.claimableAt });
    }
    expect(delays).toEqual([500, 1_000, 1_500]);
    // Attempt 4 loses its lease: the sweep requeues it after min(1.5, 0.5 * 2^3) s.
    const claim = await runner.claim({ waitSeconds: 20 });
    expect(claim.status, claim.text).toBe(200);
    await cp.plane.store.db
      .updateTable("jobs")
      .set({ lease_expires_at: sql<Date>`now() - interval '1 second'` })
      .where("id", "=", job.id)
      .execute();
    await cp.plane.broker.sweep();
    const lost = await getJob(job.id);
    expect(lost).toMatchObject({ state: "queued", attempts: 4 });
    expect(Date.parse(lost.claimableAt) - Date.parse(lost.updatedAt)).toBe(1_500);
    const fifth = await runner.claim({ waitSeconds: 20 });
    expect(fifth.status, fifth.text).toBe(200);
    expect(await issuedAt(job.id)).toBeGreaterThanOrEqual(Date.parse(lost.claimableAt));
  });

  it(
    "a concurrency group of limit 2 never runs a third; the rest wait oldest " +
      "first, naming the group; other jobs are not held",
    async () => {
      const ws = "group";
      const runners = await Promise.all(
        [1, 2, 3].map((i) => registeredRunner(cp, `group-${i}`, ws, { slots: 2 })),
      );
      const grouped: Array<RestReply["json"]> = [];
      for (let i = 0; i < 4; i++)
        grouped.push(await enqueue(ws, { concurrencyKey: "deploy-api", concurrencyLimit: 2 }));
      const free = await enqueue(ws);
      const claims: RestReply[] = [];
      for (const r of runners)
        for (let i = 0; i < 2; i++) claims.push(await r.claim({ waitSeconds: 0 }));
      const leased = claims
        .filter((c) => c.status === 200)
        .map((c) => ({
          id: c.json.job.id as string,
          token: c.json.token as string,
          runner: runners[Math.floor(claims.indexOf(c) / 2)]!,
        }));
      expect(leased.map((l) => l.id).sort()).toEqual(
        [grouped[0]!.id, grouped[1]!.id, free.id].sort(),
      );
      const waiting = await getJob(grouped[2]!.id);
      expect(waiting.waiting).toEqual({
        code: "concurrency_group",
        concurrencyKey: "deploy-api",
        concurrencyRunning: 2,
        message:
          'concurrency group "deploy-api" is full: 2 of at most 2 running in ' +
          'workspace "group"; the job runs when one of them ends (the group\'s ' +
          "queued jobs go oldest first)",
      });
      expect(waiting).toMatchObject({ concurrencyKey: "deploy-api", concurrencyLimit: 2 });
      // A waiting claim is woken when a job of the group ends, and takes the oldest waiting one.
      const idle = runners[2]!;
      const next = idle.claim({ waitSeconds: 20 });
      const first = leased.find((l) => l.id === grouped[0]!.id)!;
      expect((await first.runner.complete(first.id, first.token)).status).toBe(200);
      const took = await next;
      expect(took.status, took.text).toBe(200);
      expect(took.json.job.id).toBe(grouped[2]!.id);
      const running = await cp.plane.store.db
        .selectFrom("jobs")
        .select(sql<number>`count(*)::int`.as("n"))
        .where("concurrency_key", "=", "deploy-api")
        .where("state", "=", "running")
        .executeTakeFirstOrThrow();
      expect(running.n).toBe(2);
    },
  );

  it(
    "one call for many requests (a batch): each request a different job, a " +
      "runner's picks within its slots, a group's limit counting the call's " +
      "own picks",
    async () => {
      const db = cp.plane.store.db;
      const call = async (ws: string, runnerIds: string[]) => {
        const hashes = runnerIds.map(() => randomBytes(32).toString("hex"));
        const { rows } = await sql<{ id: string; runner_id: string; token: string }>`
        select c.id::text as id, c.runner_id, encode(c.lease_token_sha256, 'hex') as token
        from forelead_claim(${runnerIds.map(() => ws)}::text[], ${runnerIds}::text[], ${hashes}::text[], 30) c`.execute(
          db,
        );
        // Each lease's token is one of the call's, once; its lease row and its job.leased event are
        // written.
        expect(new Set(rows.map((r) => r.token)).size).toBe(rows.length);
        for (const r of rows) expect(hashes).toContain(r.token);
        const leases = await db
          .selectFrom("leases")
          .select(["job_id", "runner_id"])
          .where("workspace_id", "=", ws)
          .where("ended_at", "is", null)
          .execute();
        expect(leases.map((l) => `${l.job_id} ${l.runner_id}`).sort()).toEqual(
          rows.map((r) => `${r.id} ${r.runner_id}`).sort(),
        );
        const events = await db
          .selectFrom("events")
          .select("job_id")
          .where("workspace_id", "=", ws)
          .where("type", "=", "job.leased")
          .execute();
        expect(events.map((e) => e.job_id).sort()).toEqual(rows.map((r) => r.id).sort());
        return rows;
      };

      // Slots: r1 has 2 and asks 3 times, r2 has 1 and asks twice; the oldest three jobs go, each
      // once.
      const ws = `batch-${randomBytes(4).toString("hex")}`;
      const r1 = await registeredRunner(cp, "batch-1", ws, { slots: 2 });
      const r2 = await registeredRunner(cp, "batch-2", ws, { slots: 1 });
      const jobs: string[] = [];
      for (let i = 0; i < 6; i++) jobs.push((await enqueue(ws)).id as string);
      const rows = await call(ws, ["batch-1", "batch-1", "batch-1", "batch-2", "batch-2"]);
      expect(rows.map((r) => r.id).sort()).toEqual(jobs.slice(0, 3).sort());
      expect(rows.filter((r) => r.runner_id === "batch-1")).toHaveLength(2);
      expect(rows.filter((r) => r.runner_id === "batch-2")).toHaveLength(1);

      // Groups: a job before the group, two of group "g" (limit 1), one after; one runner asks 4
      // times.
      const wg = `batch-${randomBytes(4).toString("hex")}`;
      const r3 = await registeredRunner(cp, "batch-3", wg, { slots: 4 });
      const before = (await enqueue(wg)).id as string;
      const g1 = (await enqueue(wg, { concurrencyKey: "g", concurrencyLimit: 1 })).id as string;
      await enqueue(wg, { concurrencyKey: "g", concurrencyLimit: 1 });
      const after = (await enqueue(wg)).id as string;
      const grouped = await call(wg, ["batch-3", "batch-3", "batch-3", "batch-3"]);
      expect(grouped.map((r) => r.id).sort()).toEqual([before, g1, after].sort());
      await Promise.all([r1, r2, r3].map((r) => r.close()));
    },
  );

  it(
    "requirements: an arm64 job is never leased to an amd64 runner, and is " +
      "to an arm64 one; each unmet requirement is named",
    async () => {
      const ws = "reqs";
      const amd = await registeredRunner(cp, "reqs-amd", ws, {
        architecture: "amd64",
        os: "linux",
        executionKinds: ["docker"],
        features: ["cancel-v1"],
      });
      const job = await enqueue(ws, { requirements: { architecture: "arm64" } });
      expect(job.requirements).toEqual({ architecture: "arm64" });
      expect(job.waiting).toEqual({
        code: "unmet_requirements",
        unmetRequirement: "architecture arm64",
        message:
          'no runner with architecture arm64 in workspace "reqs" among those with ' +
          "labels linux: register one that has it, or drop it from the job's " +
          "requirements",
      });
      expect((await amd.claim({ waitSeconds: 0 })).status).toBe(204);
      for (const [requirements, unmet] of [
        [{ os: "darwin" }, "os darwin"],
        [{ executionKind: "process" }, "executionKind process"],
        [{ features: ["cancel-v1", "checkpoint-v1"] }, "feature checkpoint-v1"],
      ] as const) {
        const other = await enqueue(ws, { requirements });
        expect(other.waiting, JSON.stringify(requirements)).toMatchObject({
          code: "unmet_requirements",
          unmetRequirement: unmet,
        });
        expect(other.waiting.message).toContain(`no runner with ${unmet}`);
      }
      const met = await enqueue(ws, {
        requirements: {
          architecture: "amd64",
          os: "linux",
          executionKind: "docker",
          features: ["cancel-v1"],
        },
      });
      expect(met.waiting).toBeUndefined();
      const claim = await amd.claim({ waitSeconds: 0 });
      expect(claim.json.job.id).toBe(met.id);
      const arm = await registeredRunner(cp, "reqs-arm", ws, { architecture: "arm64" });
      const armClaim = await arm.claim({ waitSeconds: 0 });
      expect(armClaim.status, armClaim.text).toBe(200);
      expect(armClaim.json.job.id).toBe(job.id);
    },
  );

  it("the runner agent registers its os, execution kind and features, and runs a job requiring them", async () => {
    const runner = await startTestRunner(cp, {
      runnerId: "caps-1",
      workspaceId: "caps",
      executor: "process",
      slots: 2,
    });
    try {
      const row = await cp.plane.store.db
        .selectFrom("runners")
        .select(["os", "execution_kinds", "features", "max_concurrency"])
        .where("runner_id", "=", "caps-1")
        .executeTakeFirstOrThrow();
      expect(row).toEqual({
        os: process.platform,
        execution_kinds: ["process"],
        features: ["cancel-v1", "progress-v1", "result-v1"],
        max_concurrency: 2,
      });
      // The admin runner listing shows them as registered.
      const rest = createRestClient(cp.url, cp.pki.ca.certPem, await cp.pki.service("test-admin"));
      const listed = await rest
        .request("GET", "/v1/admin/runners?workspaceId=caps")
        .finally(() => rest.close());
      expect(listed.status, listed.text).toBe(200);
      expect(listed.json.runners[0]).toMatchObject({
        runnerId: "caps-1",
        os: process.platform,
        executionKinds: ["process"],
        features: ["cancel-v1", "progress-v1", "result-v1"],
        maxConcurrency: 2,
      });
      const job = await enqueue(
        "caps",
        {
          spec: specFor("process", { argv: ["true"] }),
          requirements: { os: process.platform, executionKind: "process", features: ["cancel-v1"] },
        },
        true,
      );
      const settled = await eventually("the job to succeed", async () =>
        (await getJob(job.id)).state === "succeeded" ? true : undefined,
      );
      expect(settled).toBe(true);
    } finally {
      await runner.close();
    }
  });

  it("bad scheduling, group and requirement fields are refused with 400 naming the field", async () => {
    const cases: Array<[Record<string, unknown>, RegExp]> = [
      [{ delaySeconds: -1 }, /^delaySeconds must be a whole number of seconds from 0/],
      [
        { delaySeconds: 5, runAt: new Date(Date.now() + 60_000).toISOString() },
        /^runAt and delaySeconds exclude each other/,
      ],
      [
        { concurrencyKey: "k", concurrencyLimit: 0 },
        /^concurrencyLimit must be 1 to 10000 with a concurrencyKey/,
      ],
      [{ concurrencyKey: "k", concurrencyLimit: -2 }, /^concurrencyLimit must be 1 to 10000/],
      [{ concurrencyLimit: 2 }, /^concurrencyLimit needs a concurrencyKey/],
      [
        { requirements: { executionKind: "vm" } },
        /^requirements\.executionKind "vm" is not an execution kind: one of docker, process/,
      ],
      [
        { requirements: { features: ["ok", "not ok"] } },
        /^requirements\.features\[1\] "not ok" is not a capability name/,
      ],
      [{ backoff: { initialSeconds: 0 } }, /^backoff\.initialSeconds must be more than 0/],
      [
        { backoff: { initialSeconds: 10, maxSeconds: 5 } },
        /^backoff\.maxSeconds must be 0 \(an hour\) or from backoff\.initialSeconds \(10\)/,
      ],
    ];
    for (const [fields, message] of cases) {
      const reply = await admin.enqueue({ workspaceId: "bad-input", ...fields });
      expect(reply.status, `${JSON.stringify(fields)}: ${reply.text}`).toBe(400);
      expect(reply.json.message, JSON.stringify(fields)).toMatch(message);
    }
    const runner = await registeredRunner(cp, "bad-reg", "bad-input");
    const reg = await runner.register({ executionKinds: ["docker", "kvm"] });
    expect(reg.status, reg.text).toBe(400);
    expect(reg.json.message).toMatch(/^executionKinds\[1\] "kvm" is not an execution kind/);
  });
});
