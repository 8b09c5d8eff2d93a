import "reflect-metadata";
import { describe, expect, it } from "vitest";
import { eventually } from "../support/actors.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";
import { specFor, startTestRunner } from "../support/runner-agent.js";

// A result within the 1 MiB result bound whose completion goes over the control plane's default
// body bound (1 MiB) is refused (413); the runner then fails the job with invalid_result instead of
// leaving it to its lease's expiry (docs/job-contract.md). The runner's side alone: the process
// executor.
const cp = useControlPlane({ leaseSeconds: 6 });
const { admin } = cp;
const tag = Math.random().toString(36).slice(2, 8);

describe(`a result the control plane's body bound refuses (${databaseKind})`, () => {
  it("fails the job with invalid_result naming the refusal, at once, without a result", async () => {
    const runner = await startTestRunner(cp, {
      runnerId: `rb-${tag}`,
      workspaceId: "rbound",
      executor: "process",
    });
    try {
      // Exactly 1 MiB of JSON: within the result bound, so only the body bound refuses it.
      const script =
        "{ printf '{\"x\":\"'; head -c 1048568 /dev/zero | tr '\\0' a; printf " +
        "'\"}'; } > output/result.json; wc -c < output/result.json";
      const reply = await admin.enqueue({
        workspaceId: "rbound",
        spec: specFor("process", { argv: ["sh", "-c", script] }),
      });
      expect(reply.status, reply.text).toBe(200);
      const jobId: string = reply.json.job.id;
      const job = await eventually(
        `job ${jobId} to settle`,
        async () => {
          const j = (await admin.job(jobId)).json.job;
          return ["succeeded", "failed", "cancelled"].includes(j.state) ? j : undefined;
        },
        30_000,
      );
      expect(runner.recorded.job(jobId).logs.map((l) => l.text)).toContain("1048576");
      expect(job).toMatchObject({
        state: "failed",
        attempts: 1,
        error: { code: "invalid_result" },
      });
      expect(job.error.message).toMatch(
        /^the control plane refused the job's result: .*413 resource_exhausted: the request body is over 1048576 bytes/,
      );
      expect(job.result).toBeUndefined();
    } finally {
      await runner.close();
    }
  });
});
