import type { Lease } from "../../../gen/forelead/runner/v1/job_pb.js";

/**
 * Puts a job's code in place before it runs: for checkout and agent jobs,
 * the tree of the lease's pinned base commit, imported from the control
 * plane's base bundle and verified against the lease's baseTree. The code
 * routes and the import live elsewhere (src/runner/checkout/checkout.ts); the agent
 * only needs this step.
 */
export interface CheckoutStep {
  /**
   * Writes the tree into `dir` (which does not exist yet). Throws a
   * CheckoutError when the code cannot be had or does not match the lease.
   */
  checkout(lease: Lease, leaseToken: string, dir: string, signal: AbortSignal): Promise<void>;
}

/** Why a checkout failed, as the job's error. */
export class CheckoutError extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly retryable: boolean,
  ) {
    super(message);
    this.name = "CheckoutError";
  }
}

/** Whether a job of `kind` needs its code checked out first. */
export function needsCheckout(kind: string): boolean {
  return kind === "checkout" || kind === "agent";
}
