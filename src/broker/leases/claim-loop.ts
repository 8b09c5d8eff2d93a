import { Code, ConnectError } from "@connectrpc/connect";
import type { Kysely } from "kysely";
import { drainOrdered } from "../fleet/drain.js";
import type { Database } from "../../store/schema.js";
import { logUnlessUnreachable } from "../../store/unreachable.js";
import { maxLeasesPerClaim } from "../../protocol/claims.js";
import { withInputs } from "../pipelines/inputs.js";
import type { SettleHook } from "../pipelines/settle-hook.js";
import type { BrokerObserver } from "../observer.js";
import { hasQueuedJobs } from "../jobs/enqueue.js";
import type { LeaseHolder } from "./check.js";
import { anyLeaseExpired } from "./expire.js";
import { pinClaimedJob, type CodeHooks } from "./pinning.js";
import { releaseLease } from "./release.js";
import type { LeaseView } from "./views.js";
import type { Wake, Wakeups } from "./wakeups.js";

/** Longest a claim may wait for a job, in seconds. */
const maxClaimWaitSeconds = 20;

/**
 * The longest a claim is held before it answers "no job": two thirds of the
 * lease length (at most maxClaimWaitSeconds), so a runner that keeps polling
 * is heard from (runners.last_seen_at) well within the lease length, the
 * window in which it counts as live (status, and the refusal of a second
 * process of it at register).
 */
function pollBoundSeconds(leaseSeconds: number): number {
  return Math.min(maxClaimWaitSeconds, Math.max(1, Math.floor((leaseSeconds * 2) / 3)));
}

/**
 * Refuses a claim's waitSeconds or maxLeases out of range (invalid_argument), before anything is
 * claimed or settled.
 */
export function checkClaimRequest(waitSeconds: number, maxLeases = 1): void {
  if (!Number.isInteger(waitSeconds) || waitSeconds < 0 || waitSeconds > maxClaimWaitSeconds) {
    throw new ConnectError(
      `waitSeconds must be 0 to ${maxClaimWaitSeconds}; got ${waitSeconds}`,
      Code.InvalidArgument,
    );
  }
  if (!Number.isInteger(maxLeases) || maxLeases < 1 || maxLeases > maxLeasesPerClaim) {
    throw new ConnectError(
      `maxLeases must be 1 to ${maxLeasesPerClaim} (0 or unset means 1); got ${maxLeases}`,
      Code.InvalidArgument,
    );
  }
}

/**
 * The leases of claims made together: every one that was taken, in order. A failed claim (its
 * error) fails the call only when none was taken, so a lease taken is never dropped unanswered.
 */
async function claimedLeases(
  claims: ReadonlyArray<Promise<LeaseView | undefined>>,
): Promise<LeaseView[]> {
  const settledClaims = await Promise.allSettled(claims);
  const leases = settledClaims.flatMap((r) =>
    r.status === "fulfilled" && r.value ? [r.value] : [],
  );
  const failed = settledClaims.find((r) => r.status === "rejected");
  if (failed && !leases.length) throw failed.reason;
  return leases;
}

/** What the claim loop needs from its broker. */
export interface ClaimLoopDeps {
  readonly db: Kysely<Database>;
  readonly wakeups: Wakeups<LeaseHolder, LeaseView>;
  readonly leaseSeconds: number;
  readonly code: CodeHooks | undefined;
  readonly settled: SettleHook;
  readonly observer: BrokerObserver | undefined;
  /** One claim through the claim batcher (claimBatch): a lease, or none free. */
  readonly batchedClaim: (holder: LeaseHolder) => Promise<LeaseView | undefined>;
  /** Ends leases past their expiry now; the leases it ended. */
  readonly sweepLeases: () => Promise<readonly unknown[]>;
  /** True once the broker is closing: no waiter may claim again. */
  readonly isClosed: () => boolean;
}

/** A claim as the Claim call makes it: long poll, wakeups, handoffs, a sweep of expired leases. */
export type Claim = (
  holder: LeaseHolder,
  waitSeconds: number,
  signal?: AbortSignal,
  maxLeases?: number,
) => Promise<LeaseView[]>;

/**
 * The claim loop: claims through the batcher, and when nothing is free waits for a wakeup (an
 * enqueue's NOTIFY or a handoff) until the poll bound. `answerable` finishes a lease got another
 * way (a completion's next lease) the way the loop finishes its own.
 */
export function createClaimLoop(deps: ClaimLoopDeps): {
  claim: Claim;
  answerable: (holder: LeaseHolder, lease: LeaseView) => Promise<LeaseView | undefined>;
} {
  const { db, wakeups, observer, settled, batchedClaim, sweepLeases } = deps;
  const options = { leaseSeconds: deps.leaseSeconds, code: deps.code };
  /**
   * One lease as its request answers it: its base commit pinned (pinning.ts) and a step's inputs
   * read; undefined when its job could not be pinned (then it was settled). A completion's next
   * lease and a handed-off one.
   */
  const answerable = async (
    holder: LeaseHolder,
    lease: LeaseView,
  ): Promise<LeaseView | undefined> => {
    const pinned = await pinClaimedJob(db, holder, lease, options.code, settled);
    return pinned && withInputs(db, pinned);
  };

  const claim: Claim = async (holder, waitSeconds, signal, maxLeases = 1) => {
    checkClaimRequest(waitSeconds, maxLeases);
    const startedAt = performance.now();
    const end = (leases: LeaseView[]) => {
      observer?.claimEnded(leases.length > 0, performance.now() - startedAt);
      return leases;
    };
    const deadline =
      Date.now() + Math.min(waitSeconds, pollBoundSeconds(options.leaseSeconds)) * 1000;
    let swept = false;
    let unused: Wake | undefined;
    for (;;) {
      // armed before the try: no enqueue slips between
      const waiter = wakeups.arm(holder.workspaceId, holder);
      try {
        // maxLeases requests of one holder go to the batcher in one turn, so one forelead_claim
        // call serves them (one commit) and the function's per-request slot count bounds them
        // together.
        const claimed = await claimedLeases(
          Array.from({ length: maxLeases }, () => batchedClaim(holder)),
        );
        const leases = await claimedLeases(
          claimed.map((c) => pinClaimedJob(db, holder, c, options.code, settled)),
        );
        if (leases.length)
          return end(await Promise.all(leases.map((lease) => withInputs(db, lease))));
        // those jobs could not be pinned and were settled: look for others
        if (claimed.length) continue;
        // Woken for a job this runner cannot take (labels, slots): pass the wake on while queued
        // jobs remain, so another runner gets its chance; when the job is already gone, stop.
        if (unused && (await hasQueuedJobs(db, holder.workspaceId))) waiter.relay(unused);
        unused = undefined;
        // Once per request: an expired lease may be holding a job the timer has not swept yet. Only
        // the leases, and only when one has expired: the timer's other work (overdue jobs, expired
        // input requests, stranded steps) frees no queued job and can wait for it.
        if (!swept) {
          swept = true;
          if ((await anyLeaseExpired(db)) && (await sweepLeases()).length > 0) continue;
        }
        // A runner ordered to drain gets no lease (forelead_claim): it hears so now, not at the end
        // of the poll. Asked only by a claim that leased nothing, before each wait.
        if (Date.now() >= deadline || signal?.aborted || (await drainOrdered(db, holder)))
          return end([]);
        observer?.claimWaiting(1);
        const woke = await waiter
          .wait(deadline - Date.now(), signal)
          .finally(() => observer?.claimWaiting(-1));
        if (woke && "lease" in woke) {
          // Handed a lease by an enqueue of this replica (handoff.ts). A request aborted while
          // the enqueue's statement ran cannot take it: given back, the job is queued again.
          if (signal?.aborted) {
            await releaseLease(
              db,
              { ...holder, jobId: woke.lease.job.id as string, leaseToken: woke.lease.token! },
              settled,
            ).catch((err: unknown) =>
              logUnlessUnreachable(
                "broker: a handed-off lease whose claim was gone could not be given back",
                err,
              ),
            );
            return end([]);
          }
          const lease = await answerable(holder, woke.lease);
          if (lease) return end([lease]);
          continue; // its job could not be pinned and was settled: look for others
        }
        unused = woke;
        // Closing wakes every waiter; none may claim from a database about to close. An aborted
        // request (its client closed the stream) must not claim again either: a lease made now
        // would have no one to take it, and its job would wait out the lease.
        if (deps.isClosed() || signal?.aborted) return end([]);
      } finally {
        waiter.cancel();
      }
    }
  };

  return { claim, answerable };
}
