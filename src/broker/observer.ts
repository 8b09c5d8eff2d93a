import type { JobState } from "../store/schema.js";

/**
 * What the broker reports as leases begin and end, for the metrics the
 * composition root builds (src/server/metrics/). Each call is made once, in
 * the one place the event happens, and must be cheap and synchronous: it
 * runs on the claim and completion paths.
 */
export interface BrokerObserver {
  /**
   * A claim request ended after `waitedMs`: with a lease (`granted`), or without one (it timed out
   * or was cancelled).
   */
  claimEnded(granted: boolean, waitedMs: number): void;
  /** A long-poll claim began (+1) or ended (-1) its wait for a job. */
  claimWaiting(delta: 1 | -1): void;
  /**
   * An enqueue leased a job to a claim waiting on this replica (the direct handoff, handoff.ts);
   * that claim's claimEnded counts it as granted too.
   */
  handedOff(): void;
  /** A live lease was extended. */
  renewed(): void;
  /**
   * A completion settled a lease; `state` is the job's state after it ("queued" when a retryable
   * failure requeued it).
   */
  settled(state: JobState): void;
  /**
   * The sweep ended these leases (expired, or past the job's timeout); each job's state after it.
   */
  swept(jobs: ReadonlyArray<{ readonly state: string }>): void;
}
