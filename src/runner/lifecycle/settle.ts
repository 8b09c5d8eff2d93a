import { randomUUID } from "node:crypto";
import type { Lease } from "../../../gen/forelead/runner/v1/job_pb.js";
import type { Completion, RunnerClient } from "../transport/client.js";
import { RunnerApiError } from "../transport/client.js";
import { invalidResultCode } from "../../protocol/job-result.js";

/** A completion without its id: what the job came to. */
export type Settlement = Omit<Completion, "completionId">;

/** What settling needs. */
export interface SettleContext {
  readonly client: RunnerClient;
  readonly log: (message: string) => void;
  /** Aborted when the agent is forced to stop: retries end. */
  readonly abort: AbortSignal;
  /**
   * Asks each completion for the runner's next lease (CompleteRequest.next) while `wanted()`; a
   * lease in the reply goes to `take`.
   */
  readonly next?: NextLease;
}

/** How a completion asks for the runner's next lease. */
export interface NextLease {
  /** Whether to ask now: when the runner takes more jobs (not draining, no job limit). */
  wanted(): boolean;
  /** The lease the completion's reply carried: the runner runs it as a claimed one. */
  take(lease: Lease): void;
}

/**
 * Completes a job, retrying with the same completionId until the control
 * plane answers: the same completion again gets the stored reply, so a
 * retry after a lost reply (or a restart) is safe. Any HTTP answer other
 * than a transient one (5xx, 429) ends the retries; a 409 means the lease
 * ended first and the job was settled by someone else. Resolves true when
 * the control plane took the completion. With `ctx.next` wanted, each try
 * also asks for the next lease without waiting (the claim loop long-polls
 * once the slot is free); a retry asks again, and the control plane leases
 * only into a free slot, so the runner never holds more than its slots.
 */
export async function settle(
  ctx: SettleContext,
  jobId: string,
  leaseToken: string,
  settlement: Settlement,
): Promise<boolean> {
  let completion: Completion = { completionId: `c-${randomUUID()}`, ...settlement };
  for (let attempt = 1; ; attempt++) {
    try {
      const { job, lease } = await ctx.client.complete(
        jobId,
        leaseToken,
        completion,
        ctx.next?.wanted() ? { waitSeconds: 0 } : undefined,
      );
      const code = completion.error ? ` (${completion.error.code})` : "";
      ctx.log(`job ${jobId}: completed ${completion.outcome}${code}; the job is ${job.state}`);
      if (lease) ctx.next!.take(lease);
      return true;
    } catch (err) {
      if (err instanceof RunnerApiError && !err.transient) {
        ctx.log(`job ${jobId}: the completion was refused: ${err.message}`);
        // A result the control plane will not take (over its bound, or with its body over the
        // body bound) must not leave the job running until its lease expires: fail it without.
        if (completion.result && (err.status === 400 || err.status === 413)) {
          completion = {
            completionId: `c-${randomUUID()}`,
            outcome: "failed",
            exitCode: settlement.exitCode,
            error: {
              code: invalidResultCode,
              message: `the control plane refused the job's result: ${err.message}`,
              retryable: false,
            },
          };
          continue;
        }
        return false;
      }
      if (ctx.abort.aborted) {
        ctx.log(
          `job ${jobId}: stopping before the completion was answered: ${(err as Error).message}`,
        );
        return false;
      }
      const waitMs = Math.min(10_000, 250 * 2 ** Math.min(attempt, 6));
      ctx.log(
        `job ${jobId}: completion not answered (${(err as Error).message}); retrying in ${waitMs} ms`,
      );
      await sleep(waitMs, ctx.abort);
    }
  }
}

/** Resolves after `ms`, or at once when `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}
