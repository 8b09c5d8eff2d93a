import type { RunnerClient } from "../transport/client.js";
import { leaseExpiryMs, RunnerApiError } from "../transport/client.js";
import type { ServerClock } from "./clock.js";

/** Keeps one lease alive while its job runs. */
export interface LeaseKeeper {
  /** The lease's expiry as last confirmed, in control-plane milliseconds. */
  readonly expiresAtMs: number;
  /** Why the lease was lost; undefined while it is held. */
  readonly lostReason: string | undefined;
  /** True once the control plane said the job was cancelled (a renewal or a watch notice). */
  readonly cancelSeen: boolean;
  /**
   * The runner's watch said the job was cancelled: acted on as a renewal that says so (once, and
   * not after stop).
   */
  cancelRequested(): void;
  /** Stops renewing (the job was completed or released). */
  stop(): void;
}

/** What the keeper needs and whom it tells. */
export interface LeaseKeeperOptions {
  readonly client: RunnerClient;
  readonly clock: ServerClock;
  readonly jobId: string;
  readonly leaseToken: string;
  /** Expiry from the claim, in control-plane milliseconds. */
  readonly expiresAtMs: number;
  /** A renewal (or cancelRequested) said the job was cancelled. Called once. */
  readonly onCancelRequested: () => void;
  /**
   * The lease is gone: refused by the control plane, or expired by the corrected clock while
   * renewals failed. Called once.
   */
  readonly onLost: (reason: string) => void;
  readonly log: (message: string) => void;
}

/**
 * Renews at about a third of the lease's length, so two renewals can fail
 * before it runs out. A refusal (404/409) means the lease is gone. Any other
 * failure is retried sooner; if the lease's expiry passes, by the runner's
 * clock corrected with the measured offset, without a successful renewal,
 * the lease is lost: someone else may hold the job now, so the runner must
 * stop it and never complete it.
 */
export function keepLease(options: LeaseKeeperOptions): LeaseKeeper {
  const { client, clock, jobId } = options;
  let expiresAtMs = options.expiresAtMs;
  // The length the control plane gives leases, as this lease shows it; renewals keep that rhythm.
  const lengthMs = Math.max(1000, expiresAtMs - clock.nowMs());
  const intervalMs = Math.max(200, Math.round(lengthMs / 3));
  let lostReason: string | undefined;
  let stopped = false;
  let cancelSeen = false;
  let renewTimer: NodeJS.Timeout | undefined;
  let expiryTimer: NodeJS.Timeout | undefined;

  const lose = (reason: string) => {
    if (stopped || lostReason) return;
    lostReason = reason;
    stop();
    options.onLost(reason);
  };
  const noteCancel = () => {
    if (stopped || cancelSeen) return;
    cancelSeen = true;
    options.onCancelRequested();
  };
  const stop = () => {
    stopped = true;
    clearTimeout(renewTimer);
    clearTimeout(expiryTimer);
  };

  // Fires when the control plane's clock (as estimated) reaches the expiry; re-arms while renewals
  // moved it.
  const watchExpiry = () => {
    clearTimeout(expiryTimer);
    const left = expiresAtMs - clock.nowMs();
    if (left <= 0)
      return lose(
        `the lease expired at ${new Date(expiresAtMs).toISOString()} (control-plane time) without a successful renewal`,
      );
    expiryTimer = setTimeout(watchExpiry, left);
  };

  const renew = async () => {
    if (stopped) return;
    let next = intervalMs;
    try {
      // A slow answer is still worth having until the lease runs out; the expiry watch acts on its
      // own meanwhile.
      const lease = await client.renew(
        jobId,
        options.leaseToken,
        Math.max(intervalMs, expiresAtMs - clock.nowMs()),
      );
      if (stopped) return;
      expiresAtMs = leaseExpiryMs(lease);
      watchExpiry();
      if (lease.cancelRequested) noteCancel();
    } catch (err) {
      if (stopped) return;
      if (err instanceof RunnerApiError && err.leaseGone)
        return lose(`the control plane refused the renewal: ${err.message}`);
      options.log(`job ${jobId}: renewal failed, retrying: ${(err as Error).message}`);
      next = Math.max(200, Math.round(intervalMs / 3));
    }
    if (!stopped) renewTimer = setTimeout(renew, next);
  };

  watchExpiry();
  renewTimer = setTimeout(renew, intervalMs);
  return {
    get expiresAtMs() {
      return expiresAtMs;
    },
    get lostReason() {
      return lostReason;
    },
    get cancelSeen() {
      return cancelSeen;
    },
    cancelRequested: noteCancel,
    stop,
  };
}
