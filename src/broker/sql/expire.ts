import { sql, type Kysely } from "kysely";
import type { Database } from "../../store/schema.js";
import { clearLease, expiredLease, wakeWaiters, woken } from "../lease-sql.js";

/**
 * Ends expired leases: each job goes back to the queue while attempts
 * remain, is failed with reason lease_lost when none remain, and is settled
 * as cancelled when a cancel was requested. Returns the jobs it changed.
 * Bounded per call, and SKIP LOCKED, so replicas sweep side by side.
 */
export async function expireLeases(db: Kysely<Database>, limit = 500): Promise<Array<{ id: string; state: string }>> {
  // Not measured: no scenario of docs/performance.md lets a lease expire. The search is written
  // for the partial index jobs_running_expiry (lease_expires_at where state = 'running',
  // migration 0002); the job rows, the lease rows and the wake are one statement, the shape
  // measured for the completion there (section 3).
  const { rows } = await sql<{ id: string; state: string; workspace_id: string }>`
    with expired as (
      select id, lease_id, lease_expires_at from jobs
      where ${expiredLease()}
      order by lease_expires_at
      limit ${limit}
      for update skip locked
    ), j as (
      update jobs set
        state = case when jobs.cancel_requested then 'cancelled' when jobs.attempts >= jobs.max_attempts then 'failed' else 'queued' end,
        failure_reason = case when jobs.cancel_requested then 'cancelled' when jobs.attempts >= jobs.max_attempts then 'lease_lost' end,
        failure_message = case
          when jobs.cancel_requested then 'cancelled; the lease expired at ' || to_char(expired.lease_expires_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') || ' without the runner settling the job'
          when jobs.attempts >= jobs.max_attempts then 'the lease expired at ' || to_char(expired.lease_expires_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') || ' on attempt ' || jobs.attempts || ' of ' || jobs.max_attempts || '; no attempts left'
        end,
        settled_at = case when jobs.cancel_requested or jobs.attempts >= jobs.max_attempts then now() end,
        ${clearLease}
      from expired where jobs.id = expired.id
      returning jobs.id, jobs.state, jobs.workspace_id, expired.lease_id
    ), l as (
      update leases set ended_at = now(), end_reason = 'expired' from j where leases.id = j.lease_id
    ), ${wakeWaiters("j")}
    select j.id, j.state, j.workspace_id, ${woken} from j`.execute(db);
  return rows.map((r) => ({ id: r.id, state: r.state }));
}
