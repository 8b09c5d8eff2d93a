import { describe, expect, it } from "vitest";
import { eventually, registeredRunner } from "../support/actors.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";

// A grace of one second, swept every 100 ms: a deadline passes for real, in test time.
const cp = useControlPlane({
  sweepIntervalMs: 100,
  jobTimeouts: { defaultSeconds: 3600, maxSeconds: 7200, graceSeconds: 1 },
});
const { admin } = cp;
let n = 0;
const freshWorkspace = () => `dl${++n}`;
const spec = (timeoutSeconds?: number) => ({
  image: "busybox",
  argv: ["sleep", "600"],
  timeoutSeconds,
});

describe(`job deadlines (${databaseKind})`, () => {
  it(
    "a job whose runner keeps renewing past its timeout plus the grace is " +
      "failed timeout by the control plane, and its lease is dead",
    async () => {
      const ws = freshWorkspace();
      const jobId = (await admin.enqueue({ workspaceId: ws, spec: spec(1) })).json.job.id;
      const runner = await registeredRunner(cp, "r1", ws);
      const lease = (await runner.claim()).json;
      expect(lease.job.id).toBe(jobId);
      // inside the deadline (claim + 1 s + 1 s)
      expect((await runner.renew(jobId, lease.token)).status).toBe(200);
      // The runner never stops the job and keeps renewing; the control plane ends it.
      const refused = await eventually("a renewal refused", async () => {
        const reply = await runner.renew(jobId, lease.token);
        return reply.status === 200 ? undefined : reply;
      });
      expect(refused.status, refused.text).toBe(409);
      expect(refused.json.message).toMatch(
        /^the job ran past its timeout of 1 s at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ and was failed; stop the job/,
      );
      const job = (await admin.job(jobId)).json.job;
      expect(job).toMatchObject({
        state: "failed",
        attempts: 1,
        failure: { reason: "timeout" },
        error: {
          code: "timeout",
          message: "the job ran past its timeout of 1 s and was failed by the control plane",
        },
      });
      expect(job.settledAt).toBeDefined();
      for (const reply of [
        await runner.complete(jobId, lease.token),
        await runner.release(jobId, lease.token),
      ]) {
        expect(reply.status, reply.text).toBe(409);
        expect(reply.json.message).toContain("ran past its timeout of 1 s");
      }
      // The slot is free again: the runner can take the next job.
      const next = (await admin.enqueue({ workspaceId: ws })).json.job.id;
      expect((await runner.claim()).json.job.id).toBe(next);
      await runner.close();
    },
  );

  it(
    "a job enqueued without a timeout gets the server default in its spec; " +
      "one over the maximum is refused naming both",
    async () => {
      const ws = freshWorkspace();
      const defaulted = await admin.enqueue({ workspaceId: ws, spec: spec() });
      expect(defaulted.status, defaulted.text).toBe(200);
      expect(defaulted.json.job.spec.timeoutSeconds).toBe(3600);
      expect(
        (await admin.enqueue({ workspaceId: ws, spec: spec(7200) })).json.job.spec.timeoutSeconds,
      ).toBe(7200);
      const over = await admin.enqueue({ workspaceId: ws, spec: spec(7201) });
      expect(over.status).toBe(400);
      expect(over.json.code).toBe("invalid_argument");
      expect(over.json.message).toBe(
        "spec.timeoutSeconds 7201 is over this control plane's maximum job " +
          "timeout of 7200 s (forelead serve --max-job-timeout)",
      );
    },
  );
});
