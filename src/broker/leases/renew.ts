import { sql, type Kysely } from "kysely";
import type { Database } from "../../store/schema.js";
import { checkJobId, checkLeaseToken } from "../ids.js";
import { leasedJobSnapshot, type JobRow } from "../jobs/snapshot.js";
import { leaseRefusal } from "./check.js";
import { liveLease } from "./sql-fragments.js";
import { runnerSeenStale } from "../fleet/seen.js";
import type { LeaseCall, LeaseView } from "./views.js";

/** Extends a live lease to now + lease length; carries cancelRequested. */
export async function renewLease(
  db: Kysely<Database>,
  call: LeaseCall,
  leaseSeconds: number,
): Promise<LeaseView> {
  const jobId = checkJobId(call.jobId);
  const tokenHash = checkLeaseToken(call.leaseToken);
  // The job row and its lease row in one statement: the lease row's expiry is what a runner's
  // slots are counted by (forelead_claim, listRunners), so both move together. Not measured on
  // its own: no scenario of docs/performance.md renews (its jobs end well inside one lease); it
  // has the shape measured for the completion there (one statement, one commit, instead of a
  // transaction's round trips). The runner's last_seen_at moves in the same statement, at most once
  // a second per runner, so a runner renewing many leases writes its row once (a busy runner's
  // renewals are what keep it from turning offline: forelead_runner_state).
  // drain: the runner was ordered to drain (fleet/drain.ts); its reply says so.
  const { rows } = await sql<JobRow & { drain: boolean | null }>`
    with j as (
      update jobs set lease_expires_at = now() + make_interval(secs => ${leaseSeconds}), updated_at = now()
      where ${liveLease({ jobId, workspaceId: call.workspaceId, runnerId: call.runnerId, token: tokenHash })}
      returning *
    ), l as (
      update leases set expires_at = j.lease_expires_at from j where leases.id = j.lease_id
    ), r as (
      update runners set last_seen_at = now() from j
      where ${runnerSeenStale(sql`j.workspace_id`, sql`j.runner_id`)}
    )
    select j.*, (select r.drain_ordered_by is not null from runners r
      where r.workspace_id = j.workspace_id and r.runner_id = j.runner_id) as drain
    from j`.execute(db);
  const row = rows[0];
  if (!row) throw await leaseRefusal(db, call, jobId, tokenHash);
  return {
    expiresAt: row.lease_expires_at!,
    cancelRequested: row.cancel_requested,
    job: leasedJobSnapshot(row),
    drain: row.drain === true,
  };
}
