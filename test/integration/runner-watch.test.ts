import "reflect-metadata";
import { describe, expect, it } from "vitest";
import { adminActor, eventually, leasedJob } from "../support/actors.js";
import { startTestControlPlane } from "../support/control-plane.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";
import { runnerJobs } from "../support/runner-jobs.js";
import { startTestRunner } from "../support/runner-agent.js";

// Leases of 60 s: renewals come every 20 s, so a cancel the job sees within the bounds below (10 s)
// came through the runner's watch (POST /v1/runner/watch), not a renewal.
const leaseSeconds = 60;
const cp = useControlPlane({ leaseSeconds });
const { admin } = cp;
const jobs = runnerJobs(cp, "watch");

/** Sleeps until SIGTERM, then says so and exits 143. */
const waitsForTerm = [
  "sh",
  "-c",
  "trap 'echo got TERM; exit 143' TERM; echo ready; while :; do sleep 0.1; done",
];

describe(`a runner's watch (${databaseKind})`, () => {
  it("answers a cancel of one of the runner's leases at once, and only once it is known", async () => {
    const ws = "watch-route";
    const leased = await leasedJob(cp, admin, "watch-r1", ws);
    const { runner, jobId } = leased;
    const watch = (body: Record<string, unknown>) =>
      runner.rest.request("POST", "/v1/runner/watch", {
        apiVersion: "v1",
        runnerId: runner.runnerId,
        ...body,
      });
    try {
      const nothing = await watch({ waitSeconds: 0 });
      expect(nothing.status, nothing.text).toBe(200);
      expect(nothing.json).toEqual({ apiVersion: "v1" });
      // Held open, then answered by the cancel.
      const open = watch({ waitSeconds: 20 });
      await new Promise((r) => setTimeout(r, 300));
      expect((await admin.cancel(jobId)).status).toBe(200);
      const answered = await open;
      expect(answered.status, answered.text).toBe(200);
      expect(answered.json.notices).toEqual([{ kind: "cancel", jobId }]);
      // Asked again: still there until the runner says it knows it.
      expect((await watch({ waitSeconds: 0 })).json.notices).toEqual([{ kind: "cancel", jobId }]);
      const known = await watch({ waitSeconds: 1, knownJobIds: [jobId] });
      expect(known.json.notices ?? []).toEqual([]);
      // v1's renew reply keeps its shape and still carries the cancel.
      const renewed = await runner.renew(jobId, leased.token);
      expect(renewed.json).toMatchObject({ cancelRequested: true, job: { id: jobId } });
      // Bad input is a 400 naming the bound.
      const tooLong = await watch({ waitSeconds: 21 });
      expect(tooLong.status).toBe(400);
      expect(tooLong.json.message).toContain("waitSeconds must be 0 to 20");
      const tooMany = await watch({ knownJobIds: Array.from({ length: 1025 }, (_, i) => `${i}`) });
      expect(tooMany.status).toBe(400);
      const otherRunner = await watch({ runnerId: "someone-else" });
      expect(otherRunner.status).toBe(403);
    } finally {
      await runner.close();
    }
  });

  it("another runner's watch is not woken by the cancel", async () => {
    const leased = await leasedJob(cp, admin, "watch-r2", "watch-other");
    const other = await leasedJob(cp, admin, "watch-r3", "watch-other");
    try {
      const open = other.runner.rest.request("POST", "/v1/runner/watch", {
        apiVersion: "v1",
        runnerId: "watch-r3",
        waitSeconds: 2,
      });
      expect((await admin.cancel(leased.jobId)).status).toBe(200);
      const reply = await open;
      expect(reply.status, reply.text).toBe(200);
      expect(reply.json.notices ?? []).toEqual([]);
    } finally {
      await leased.runner.close();
      await other.runner.close();
    }
  });

  it("the runner agent stops a cancelled job well before its next renewal", async () => {
    const { runner, ws } = await jobs.freshRunner("process");
    try {
      const jobId = await jobs.enqueue(ws, "process", { argv: waitsForTerm });
      await runner.waitForLine(jobId, /^ready$/);
      expect((await admin.cancel(jobId)).status).toBe(200);
      const job = await jobs.settled(jobId, 10_000);
      expect(job).toMatchObject({ state: "cancelled", attempts: 1 });
      const lines = runner.recorded.job(jobId).logs.map((l) => l.text);
      expect(lines).toContain("got TERM");
      expect(runner.recorded.job(jobId).events.map((e) => e.type)).toEqual([
        "job.started",
        "job.cancelled",
        "job.exited",
      ]);
      expect(runner.log.some((l) => l.includes(`job ${jobId}: cancel requested`))).toBe(true);
    } finally {
      await runner.close();
    }
  });
});

describe.runIf(databaseKind === "postgres")("a runner's watch across two replicas", () => {
  it("a cancel made through one replica stops the job of a runner watching the other", async () => {
    const b = await startTestControlPlane({ leaseSeconds, pki: cp.pki, database: cp.database });
    const adminB = await adminActor(b);
    const ws = "watch-replicas";
    const runner = await startTestRunner(cp, {
      runnerId: `watch-replicas-${Math.random().toString(36).slice(2, 8)}`,
      workspaceId: ws,
      executor: "process",
    });
    try {
      const jobId = await jobs.enqueue(ws, "process", { argv: waitsForTerm });
      await runner.waitForLine(jobId, /^ready$/);
      expect((await adminB.cancel(jobId)).status).toBe(200);
      const job = await eventually(
        `job ${jobId} to settle`,
        async () => {
          const j = (await adminB.job(jobId)).json.job;
          return j.state === "running" ? undefined : j;
        },
        10_000,
      );
      expect(job).toMatchObject({ state: "cancelled", attempts: 1 });
      expect(runner.recorded.job(jobId).logs.map((l) => l.text)).toContain("got TERM");
    } finally {
      await runner.close();
      await adminB.close();
      await b.close();
    }
  });
});
