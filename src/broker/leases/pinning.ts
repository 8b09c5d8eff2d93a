import { Code, ConnectError } from "@connectrpc/connect";
import { sql, type Kysely } from "kysely";
import type { Database } from "../../store/schema.js";
import { eventsCte } from "../../events/record.js";
import { settledOrRequeued } from "./events.js";
import { hashLeaseToken } from "../ids.js";
import { leasedJobSnapshot, type JobRow } from "../jobs/snapshot.js";
import type { LeaseHolder } from "./check.js";
import { clearLease, leaseHeld, liveLease } from "./sql-fragments.js";
import type { LeaseView } from "./views.js";
import { releaseLease } from "./release.js";
import type { SettleHook } from "../pipelines/settle-hook.js";
import { settleWith } from "../pipelines/settle-hook.js";

/** A branch resolved to the commit and tree a lease pins. */
interface PinnedBase {
  readonly commit: string;
  readonly tree: string;
}

/**
 * What the broker asks of the code host (src/code implements it; the server
 * passes it in, so the broker never imports the code host).
 */
export interface CodeHooks {
  /** At enqueue: throws invalid_argument for an unknown repository or branch. */
  checkTarget(repository: string, targetBranch: string): Promise<void>;
  /**
   * At claim: the branch's current commit and tree, or `{ refusal }` when the
   * job can never be pinned (repository unregistered, branch gone). Throws on
   * a passing failure (the code host unreachable).
   */
  resolvePin(repository: string, targetBranch: string): Promise<PinnedBase | { refusal: string }>;
}

/**
 * Pins a just-claimed checkout or agent job: its targetBranch becomes
 * baseCommit + baseTree, stored on the job, so every later lease of it (a
 * retry after a lost lease) carries the same pair.
 *
 * Why after the claim and not inside it: resolving a branch is a git fetch,
 * which can take seconds; inside the claim transaction it would hold the
 * runner's row lock (and the job's) for that long, and every command-job
 * claim would pay for the check. Pinning at enqueue would break the
 * contract ("pinned when claimed"). So the claim stays one fast statement
 * and, only for a job with a repository and no pin yet, a second guarded
 * statement stores the pair: `coalesce` keeps a pair stored first (by an
 * earlier lease whose pin finished late), and the token guard drops a pin
 * for a lease that died meanwhile.
 *
 * Returns the lease with its pinned job; undefined when the job could not be
 * pinned for good (it is then failed with reason "code_unavailable") or the
 * lease died during the pin. A passing failure gives the job back without
 * charging the attempt and tells the runner to claim again later (503).
 */
export async function pinClaimedJob(
  db: Kysely<Database>,
  holder: LeaseHolder,
  lease: LeaseView,
  code: CodeHooks | undefined,
  hook?: SettleHook,
): Promise<LeaseView | undefined> {
  const job = lease.job;
  if (job.kind === "command" || job.baseCommit || !lease.token) return lease;
  const jobId = job.id as string;
  const tokenHash = hashLeaseToken(lease.token);
  let pinned: PinnedBase | { refusal: string };
  try {
    pinned = code
      ? await code.resolvePin(String(job.repository), String(job.targetBranch))
      : { refusal: "this control plane serves no code routes" };
  } catch (err) {
    await releaseLease(db, { ...holder, jobId, leaseToken: lease.token }, hook).catch(
      () => undefined,
    );
    const why = err instanceof ConnectError ? err.rawMessage : "the code host failed";
    if (!(err instanceof ConnectError)) console.error(`broker: pinning job ${jobId} failed:`, err);
    throw new ConnectError(
      `job ${jobId} could not be pinned to its base commit (${why}); it is queued again: claim again later`,
      Code.Unavailable,
    );
  }
  if ("refusal" in pinned) {
    await failUnpinnable(
      db,
      jobId,
      holder.runnerId,
      tokenHash,
      `the base commit could not be pinned at claim: ${pinned.refusal}`,
      hook,
    );
    return undefined;
  }
  const { rows } = await sql<JobRow>`
    update jobs set base_commit = coalesce(base_commit, ${pinned.commit}), base_tree =
      coalesce(base_tree, ${pinned.tree}), updated_at = now()
    where ${liveLease({ jobId, token: tokenHash })}
    returning *`.execute(db);
  const row = rows[0];
  if (!row) return undefined;
  return {
    ...lease,
    expiresAt: row.lease_expires_at!,
    cancelRequested: row.cancel_requested,
    job: leasedJobSnapshot(row),
  };
}

async function failUnpinnable(
  db: Kysely<Database>,
  jobId: string,
  runnerId: string,
  tokenHash: Buffer,
  message: string,
  hook?: SettleHook,
): Promise<void> {
  await settleWith(
    db,
    hook,
    async (q) =>
      (
        await sql<{ id: string }>`
    with j as (
      update jobs set state = 'failed', failure_reason = 'code_unavailable', failure_message
        = ${message}, settled_at = now(), ${clearLease}
      where ${leaseHeld({ jobId, token: tokenHash })}
      returning id, workspace_id, state, attempts, error, failure_reason, ${runnerId}::text as lease_runner_id
    ), ${eventsCte("ev", "j", settledOrRequeued("released"))}
    , l as (update leases set ended_at = now(), end_reason = 'settled' where token_sha256
      = ${tokenHash} and exists (select 1 from j))
    select j.id from j`.execute(q)
      ).rows,
  );
}
