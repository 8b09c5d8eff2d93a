import { sql, type Kysely, type Transaction } from "kysely";
import type { Database } from "../store/schema.js";
import type { LeaseHolder } from "./lease-check.js";
import { jobsChannel } from "./wakeups.js";

/**
 * Gives back every lease a runner holds, as a release would, in one
 * statement: each job is queued again without charging the attempt (settled
 * as cancelled when a cancel was requested), the lease ends as "released" so
 * a later call with its token is told so, and waiting claims are woken. Used
 * when a runner is retired: its jobs must not wait for lease expiry.
 * Returns the ids of the jobs released.
 */
export async function releaseRunnerLeases(db: Kysely<Database> | Transaction<Database>, holder: LeaseHolder): Promise<string[]> {
  // The first CTE locks the runner's jobs and keeps their lease ids, which the
  // update clears; the leases are then ended by those ids.
  const { rows } = await sql<{ id: string; state: string }>`
    with held as (
      select id, lease_id from jobs
      where workspace_id = ${holder.workspaceId} and runner_id = ${holder.runnerId} and state = 'running'
      for update
    ), j as (
      update jobs set
        state = case when jobs.cancel_requested then 'cancelled' else 'queued' end,
        attempts = case when jobs.cancel_requested then jobs.attempts else jobs.attempts - 1 end,
        settled_at = case when jobs.cancel_requested then now() end,
        failure_reason = case when jobs.cancel_requested then 'cancelled' end,
        failure_message = case when jobs.cancel_requested then 'cancelled; the runner was retired' end,
        runner_id = null, lease_id = null, lease_token_sha256 = null, lease_expires_at = null, updated_at = now()
      from held where jobs.id = held.id
      returning jobs.id, jobs.state, held.lease_id
    ), l as (
      update leases set ended_at = now(), end_reason = 'released', expires_at = least(expires_at, now())
      from j where leases.id = j.lease_id
    ), wake as (
      select pg_notify(${jobsChannel}, ${holder.workspaceId}) from j where j.state = 'queued'
    )
    select j.id, j.state, (select count(*) from wake) as woken from j`.execute(db);
  return rows.map((r) => r.id);
}
