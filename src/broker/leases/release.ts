import { sql, type Kysely, type RawBuilder, type Transaction } from "kysely";
import type { Database } from "../../store/schema.js";
import { checkJobId, checkLeaseToken } from "../ids.js";
import type { JobRow } from "../jobs/snapshot.js";
import { leaseRefusal, type LeaseHolder } from "./check.js";
import { settleWith, type SettleHook } from "../pipelines/settle-hook.js";
import { eventsCte } from "../../events/record.js";
import { clearLease, leaseHeld, liveLease, wakeWaiters, woken } from "./sql-fragments.js";
import { settledOrRequeued } from "./events.js";
import type { LeaseCall } from "./views.js";

// Not measured on its own: no scenario of docs/performance.md releases a
// lease. Each release is one statement (the job, the lease row and the wake)
// for the reason measured for the completion there: every round trip of a
// transaction costs both event loops, and the wake commits with the job.

/**
 * The SET items of a job whose lease is given back: `next` (queued again, or
 * waiting_input for a suspend) without charging the attempt, or settled as
 * cancelled with `cancelledMessage` when a cancel was requested.
 */
export function givenBack(
  cancelledMessage: string,
  next: "queued" | "waiting_input" = "queued",
): RawBuilder<unknown> {
  return sql`
    state = case when jobs.cancel_requested then 'cancelled' else ${sql.lit(next)} end,
    attempts = case when jobs.cancel_requested then jobs.attempts else jobs.attempts - 1 end,
    settled_at = case when jobs.cancel_requested then now() end,
    failure_reason = case when jobs.cancel_requested then 'cancelled' end,
    failure_message = case when jobs.cancel_requested then ${cancelledMessage} end,
    ${clearLease}`;
}

/**
 * The SET items of a lease row given back (`reason`: released, suspended): ended now, and no longer
 * live by its expiry either.
 */
export function givenBackLeaseRow(reason: "released" | "suspended"): RawBuilder<unknown> {
  return sql`ended_at = now(), end_reason = ${sql.lit(reason)}, expires_at = least(expires_at, now())`;
}

/**
 * Gives a live lease back: the job is queued again at once, without charging
 * the attempt. A job whose cancel was requested is settled as cancelled.
 */
export async function releaseLease(
  db: Kysely<Database>,
  call: LeaseCall,
  hook?: SettleHook,
): Promise<void> {
  const jobId = checkJobId(call.jobId);
  const tokenHash = checkLeaseToken(call.leaseToken);
  const rows = await settleWith(
    db,
    hook,
    async (q) =>
      (
        await sql<JobRow>`
    with j as (
      update jobs set ${givenBack("cancelled; the runner released the lease")}
      where ${liveLease({ jobId, workspaceId: call.workspaceId, runnerId: call.runnerId, token: tokenHash })}
      returning *, ${call.runnerId}::text as lease_runner_id
    ), l as (
      update leases set ${givenBackLeaseRow("released")}
      where token_sha256 = ${tokenHash} and exists (select 1 from j)
    ), ${eventsCte("ev", "j", settledOrRequeued("released"))}, ${wakeWaiters("j")}
    select j.*, ${woken} from j`.execute(q)
      ).rows,
  );
  if (!rows[0]) throw await leaseRefusal(db, call, jobId, tokenHash);
}

/**
 * Gives back every lease a runner holds, as a release would, in one
 * statement: each job is queued again without charging the attempt (settled
 * as cancelled when a cancel was requested), the lease ends as "released" so
 * a later call with its token is told so, and waiting claims are woken. Used
 * when a runner is retired: its jobs must not wait for lease expiry.
 * Returns the ids of the jobs released.
 */
export async function releaseRunnerLeases(
  db: Kysely<Database> | Transaction<Database>,
  holder: LeaseHolder,
): Promise<string[]> {
  // The first CTE locks the runner's jobs and keeps their lease ids, which the
  // update clears; the leases are then ended by those ids.
  const { rows } = await sql<{ id: string; state: string }>`
    with held as (
      select id, lease_id from jobs
      where ${leaseHeld({ workspaceId: holder.workspaceId, runnerId: holder.runnerId })}
      for update
    ), j as (
      update jobs set ${givenBack("cancelled; the runner was retired")}
      from held where jobs.id = held.id
      returning jobs.id, jobs.state, jobs.workspace_id, jobs.claimable_at, jobs.concurrency_key,
        jobs.attempts, jobs.error, jobs.failure_reason, held.lease_id, ${holder.runnerId}::text as lease_runner_id
    ), l as (
      update leases set ${givenBackLeaseRow("released")}
      from j where leases.id = j.lease_id
    ), ${eventsCte("ev", "j", settledOrRequeued("released"))}, ${wakeWaiters("j")}
    select j.id, j.state, ${woken} from j`.execute(db);
  return rows.map((r) => r.id);
}
