import { expect } from "vitest";
import { eventually } from "./actors.js";
import type { ControlPlaneFixture } from "./fixture.js";
import {
  specFor,
  startTestRunner,
  type ExecutorKind,
  type TestRunner,
  type TestRunnerOptions,
} from "./runner-agent.js";

/**
 * Jobs run by real runner agents of a suite: each `freshRunner` starts a runner in a
 * workspace of its own (`<prefix><n>`; runner ids carry a random tag, since Docker resources
 * are found by the forelead.runner label and other suites may share the engine).
 */
export function runnerJobs(cp: ControlPlaneFixture, prefix: string) {
  const tag = Math.random().toString(36).slice(2, 8);
  let n = 0;
  return {
    async freshRunner(
      executor: ExecutorKind,
      options: Pick<TestRunnerOptions, "jobNetwork"> = {},
    ): Promise<{ runner: TestRunner; ws: string }> {
      const ws = `${prefix}${++n}`;
      const runnerId = `${ws}-${tag}`;
      return {
        runner: await startTestRunner(cp, { runnerId, workspaceId: ws, executor, ...options }),
        ws,
      };
    },
    /** Enqueues `spec` (made fit for `executor`) in `ws`; the job's id. */
    async enqueue(
      ws: string,
      executor: ExecutorKind,
      spec: Record<string, unknown>,
      extra: Record<string, unknown> = {},
    ): Promise<string> {
      const reply = await cp.admin.enqueue({
        workspaceId: ws,
        spec: specFor(executor, spec),
        ...extra,
      });
      expect(reply.status, reply.text).toBe(200);
      return reply.json.job.id;
    },
    /** The job once it has settled (succeeded, failed or cancelled). */
    settled(jobId: string, withinMs = 30_000) {
      return eventually(
        `job ${jobId} to settle`,
        async () => {
          // the view as REST JSON (RestReply.json)
          const job = (await cp.admin.job(jobId)).json.job;
          return ["succeeded", "failed", "cancelled"].includes(job.state) ? job : undefined;
        },
        withinMs,
      );
    },
  };
}
