import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { adminActor, eventually, runnerActor } from "../support/actors.js";
import { startTestControlPlane } from "../support/control-plane.js";
import { createTestDatabase, databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";

// Leases of one second, swept every 100 ms: expiry happens for real, in test time.
const cp = useControlPlane({ leaseSeconds: 1, sweepIntervalMs: 100 });
const { admin } = cp;
let n = 0;
const freshWorkspace = () => `exp${++n}`;

async function jobState(jobId: string, state: string) {
  return eventually(`job ${jobId} to be ${state}`, async () => {
    const job = (await admin.job(jobId)).json.job;
    return job.state === state ? job : undefined;
  });
}

describe(`lease expiry (${databaseKind})`, () => {
  it(
    "an expired lease's token is dead for renew, release and complete, and " +
      "the job is claimable with a new token",
    async () => {
      const ws = freshWorkspace();
      const jobId = (await admin.enqueue({ workspaceId: ws })).json.job.id;
      const runner = await runnerActor(cp, "r1", ws);
      await runner.register();
      const first = (await runner.claim()).json;
      await jobState(jobId, "queued");
      for (const reply of [
        await runner.renew(jobId, first.token),
        await runner.release(jobId, first.token),
        await runner.complete(jobId, first.token),
      ]) {
        expect(reply.status, reply.text).toBe(409);
        expect(reply.json.message).toMatch(/expired at \d{4}-\d\d-\d\dT/);
      }
      const other = await runnerActor(cp, "r2", ws);
      await other.register();
      const second = (await other.claim()).json;
      expect(second.job.id).toBe(jobId);
      expect(second.token).not.toBe(first.token);
      expect((await admin.job(jobId)).json.job).toMatchObject({
        state: "running",
        runnerId: "r2",
        attempts: 2,
      });
      // The old token stays dead even though the job is running again.
      const stale = await runner.complete(jobId, first.token);
      expect(stale.status).toBe(409);
      const done = await other.complete(jobId, second.token);
      expect(done.json.job.state).toBe("succeeded");
      await Promise.all([runner.close(), other.close()]);
    },
  );

  it("renewing keeps a lease alive past its original expiry", async () => {
    const ws = freshWorkspace();
    const jobId = (await admin.enqueue({ workspaceId: ws })).json.job.id;
    const runner = await runnerActor(cp, "r1", ws);
    await runner.register();
    const lease = (await runner.claim()).json;
    const until = Date.parse(lease.expiresAt) + 1500;
    while (Date.now() < until) {
      const renew = await runner.renew(jobId, lease.token);
      expect(renew.status, renew.text).toBe(200);
      await new Promise((r) => setTimeout(r, 300));
    }
    expect((await runner.complete(jobId, lease.token)).json.job).toMatchObject({
      state: "succeeded",
      attempts: 1,
    });
    await runner.close();
  });

  it("a lost lease requeues until the attempts are used, then fails the job with reason lease_lost", async () => {
    const ws = freshWorkspace();
    const jobId = (await admin.enqueue({ workspaceId: ws, maxAttempts: 2 })).json.job.id;
    const runner = await runnerActor(cp, "r1", ws);
    await runner.register();
    expect((await runner.claim()).json.job.id).toBe(jobId);
    await jobState(jobId, "queued");
    expect((await runner.claim()).json.job.id).toBe(jobId);
    const failed = await jobState(jobId, "failed");
    expect(failed).toMatchObject({ attempts: 2, failure: { reason: "lease_lost" } });
    expect(failed.failure.message).toContain("on attempt 2 of 2; no attempts left");
    expect((await runner.claim()).status).toBe(204);
    await runner.close();
  });

  it("a running job whose cancel the runner never settles is settled as cancelled when its lease expires", async () => {
    const ws = freshWorkspace();
    const jobId = (await admin.enqueue({ workspaceId: ws })).json.job.id;
    const runner = await runnerActor(cp, "r1", ws);
    await runner.register();
    await runner.claim();
    await admin.cancel(jobId);
    const cancelled = await jobState(jobId, "cancelled");
    expect(cancelled.failure.reason).toBe("cancelled");
    expect(cancelled.attempts).toBe(1);
    expect((await runner.claim()).status).toBe(204); // not requeued
    await runner.close();
  });
});

describe(`restarts (${databaseKind})`, () => {
  it("restarting the control plane loses no job and no live lease", async () => {
    // Embedded: a data directory, so a second process life sees the same database.
    const dir =
      databaseKind === "embedded" ? await mkdtemp(join(tmpdir(), "forelead-restart-")) : undefined;
    const database = dir
      ? {
          location: join(dir, "db"),
          kind: "embedded" as const,
          drop: () => rm(dir, { recursive: true, force: true }),
        }
      : await createTestDatabase();
    const first = await startTestControlPlane({ database });
    const a1 = await adminActor(first);
    const kept = (await a1.enqueue({ workspaceId: "w1" })).json.job.id;
    const leased = (await a1.enqueue({ workspaceId: "w1" })).json.job.id;
    const r1 = await runnerActor(first, "r1", "w1");
    await r1.register({ slots: 1 });
    const lease = (await r1.claim()).json;
    expect(lease.job.id).toBe(kept); // oldest first
    await Promise.all([a1.close(), r1.close()]);
    await first.plane.close();

    const second = await startTestControlPlane({ database, pki: first.pki });
    try {
      const a2 = await adminActor(second);
      const r2 = await runnerActor(second, "r1", "w1");
      const renewed = await r2.renew(kept, lease.token);
      expect(renewed.status, renewed.text).toBe(200);
      expect((await a2.job(leased)).json.job.state).toBe("queued");
      expect((await r2.complete(kept, lease.token)).json.job.state).toBe("succeeded");
      expect((await r2.claim()).json.job.id).toBe(leased);
      await Promise.all([a2.close(), r2.close()]);
    } finally {
      await second.plane.close();
      await database.drop();
    }
  });
});
