import { sql, type Kysely, type RawBuilder } from "kysely";
import type { Database } from "../../store/schema.js";
import type { JobTimeouts } from "../jobs/rules.js";
import { eventsCte } from "../../events/record.js";
import {
  clearLease,
  expiredLease,
  leaseHeld,
  liveLease,
  retryClaimableAt,
  wakeWaiters,
  woken,
} from "./sql-fragments.js";
import { settledOrRequeued } from "./events.js";
import { settleWith, type SettleHook } from "../pipelines/settle-hook.js";

/** A timestamptz expression as RFC 3339 UTC text, for a message written in SQL. */
function utcText(at: RawBuilder<unknown>): RawBuilder<string> {
  return sql<string>`to_char(${at} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')`;
}

/**
 * Ends expired and overdue leases. A job running past its timeout plus the grace (its runner still
 * renewing, or gone) is failed with error and reason `timeout`. Otherwise, for an expired lease,
 * the job goes back to the queue while attempts remain (claimable after its backoff:
 * retryClaimableAt), is failed with reason lease_lost when none remain, and is settled as cancelled
 * when a cancel was requested. Returns the jobs it changed, after `hook` ran over them in the same
 * transaction. Bounded per call, and SKIP LOCKED, so replicas sweep side by side.
 */
export async function expireLeases(
  db: Kysely<Database>,
  timeouts: Pick<JobTimeouts, "defaultSeconds" | "graceSeconds">,
  limit = 500,
  hook?: SettleHook,
): Promise<Array<{ id: string; state: string }>> {
  // Not measured: no scenario of docs/performance.md lets a lease expire. The expiry search is
  // written for the partial index jobs_running_expiry (lease_expires_at where state = 'running').
  // The deadline (the lease's issue time plus the job's timeout, the server default for a job
  // stored without one) is not indexed: the sweep reads every running job's
  // row and lease row, which are as many as the runners' slots, not the queue. The job rows,
  // the lease rows and the wake are one statement, the shape measured for the completion
  // there (section 3).
  const timeout = sql<number>`coalesce((j.spec->>'timeoutSeconds')::int, ${timeouts.defaultSeconds}::int)`;
  const deadline = sql`(l.issued_at + make_interval(secs => ${timeout}))`;
  const overdue = sql`${deadline} + make_interval(secs => ${timeouts.graceSeconds}::int) <= now()`;
  const rows = await settleWith(
    db,
    hook,
    async (q) =>
      (
        await sql<{ id: string; state: string; workspace_id: string }>`
    with expired as (
      select j.id, j.lease_id, j.runner_id, j.lease_expires_at, ${timeout} as timeout_seconds, ${deadline} as deadline,
        ${overdue} as timed_out
      from jobs j join leases l on l.id = j.lease_id
      where (${expiredLease("j")}) or (${leaseHeld({}, "j")} and ${overdue})
      order by j.lease_expires_at
      limit ${limit}
      for update of j skip locked
    ), j as (
      update jobs set
        state = case when expired.timed_out then 'failed' when jobs.cancel_requested then
          'cancelled' when jobs.attempts >= jobs.max_attempts then 'failed' else 'queued' end,
        failure_reason = case when expired.timed_out then 'timeout' when jobs.cancel_requested then
          'cancelled' when jobs.attempts >= jobs.max_attempts then 'lease_lost' end,
        failure_message = case
          when expired.timed_out then 'the job ran past its timeout of ' || expired.timeout_seconds
            || ' s at ' || ${utcText(sql`expired.deadline`)} || ' and was failed'
          when jobs.cancel_requested then 'cancelled; the lease expired at '
            || ${utcText(sql`expired.lease_expires_at`)} || ' without the runner settling the job'
          when jobs.attempts >= jobs.max_attempts then 'the lease expired at '
            || ${utcText(sql`expired.lease_expires_at`)} || ' on attempt ' || jobs.attempts ||
            ' of ' || jobs.max_attempts || '; no attempts left'
        end,
        error = case when expired.timed_out then jsonb_build_object('code', 'timeout', 'message',
          'the job ran past its timeout of ' || expired.timeout_seconds ||
          ' s and was failed by the control plane', 'retryable', false) else jobs.error end,
        settled_at = case when expired.timed_out or jobs.cancel_requested or jobs.attempts >=
          jobs.max_attempts then now() end,
        claimable_at = case when expired.timed_out or jobs.cancel_requested or jobs.attempts >=
          jobs.max_attempts then jobs.claimable_at else ${retryClaimableAt} end,
        ${clearLease}
      from expired where jobs.id = expired.id
      returning jobs.id, jobs.state, jobs.workspace_id, jobs.claimable_at, jobs.concurrency_key,
        jobs.attempts, jobs.error, jobs.failure_reason, expired.lease_id, expired.runner_id as
        lease_runner_id, expired.timed_out
    ), l as (
      update leases set ended_at = now(), end_reason = case when j.timed_out then 'timed_out' else
        'expired' end from j where leases.id = j.lease_id
    ), ${eventsCte("ev", "j", settledOrRequeued("lease_lost"))},
    ${eventsCte(
      "lost",
      sql`ev join j on j.id =
      ev.job_id`,
      {
        type: sql`'runner.lease_lost'`,
        workspaceId: sql`j.workspace_id`,
        runnerId: sql`j.lease_runner_id`,
        jobId: sql`j.id`,
        data: sql`jsonb_build_object('attempt',
      j.attempts)`,
      },
      sql`not j.timed_out`,
    )},
    ${wakeWaiters("j")}
    select j.id, j.state, j.workspace_id, ${woken} from j`.execute(q)
      ).rows,
  );
  return rows.map((r) => ({ id: r.id, state: r.state }));
}

/**
 * Whether some job runs under an expired lease: what a claim that found
 * nothing asks before it sweeps (expireLeases, whose statement costs a few
 * milliseconds of planning alone) — one probe of the partial index
 * jobs_running_expiry. Overdue jobs (past their timeout, lease still live)
 * are left to the timer's sweep: failing them frees no queued job.
 */
export async function anyLeaseExpired(db: Kysely<Database>): Promise<boolean> {
  const { rows } = await sql<{
    expired: boolean;
  }>`select exists (select 1 from jobs j where ${expiredLease("j")}) as expired`.execute(db);
  return rows[0]?.expired === true;
}

/**
 * Makes job `jobId`'s live lease expire now, as if its time ran out; the
 * next sweep (expireLeases) ends it. For drills that must see a runner
 * meet an expired lease (the conformance kit, src/conformance/): returns
 * false when the job holds no live lease.
 */
export async function expireLeaseNow(db: Kysely<Database>, jobId: string): Promise<boolean> {
  const { rows } = await sql<{ lease_id: number }>`
    with j as (
      update jobs set lease_expires_at = now() - interval '1 second' where ${liveLease({ jobId })} returning lease_id
    )
    update leases set expires_at = now() - interval '1 second' from j where leases.id = j.lease_id
      returning leases.id as lease_id`.execute(db);
  return rows.length > 0;
}

/**
 * Fails the jobs whose input request was not answered by its expiry
 * (docs/suspend.md) with reason input_expired, in one statement with their
 * job.input_expired and job.settled events. Part of every sweep, beside
 * expireLeases; bounded and SKIP LOCKED the same way. The search is the
 * partial index job_inputs_unanswered.
 */
export async function expireInputRequests(
  db: Kysely<Database>,
  limit = 500,
): Promise<Array<{ id: string; state: string }>> {
  const { rows } = await sql<{ id: string; state: string }>`
    with due as (
      select j.id, i.request_id, i.expires_at from job_inputs i join jobs j on j.input_lease_id = i.lease_id
      where i.answered_at is null and i.expires_at <= now() and j.state = 'waiting_input'
      order by i.expires_at
      limit ${limit}
      for update of j skip locked
    ), j as (
      update jobs set state = 'failed', failure_reason = 'input_expired',
        failure_message = 'input request "' || due.request_id || '" was not answered by '
          || ${utcText(sql`due.expires_at`)} || '; the job was failed',
        settled_at = now(), updated_at = now()
      from due where jobs.id = due.id
      returning jobs.id, jobs.state, jobs.workspace_id, jobs.attempts, due.request_id
    ), ${eventsCte("ev", "j", {
      type: sql`'job.input_expired'`,
      workspaceId: sql`j.workspace_id`,
      jobId: sql`j.id`,
      data: sql`jsonb_build_object('requestId',
      j.request_id)`,
    })},
    ${eventsCte(
      "settled",
      sql`ev join j on j.id =
      ev.job_id`,
      {
        type: sql`'job.settled'`,
        workspaceId: sql`j.workspace_id`,
        jobId: sql`j.id`,
        data: sql`jsonb_build_object('outcome',
      'failed', 'errorCode', 'input_expired', 'attempt', j.attempts)`,
      },
    )}
    select j.id, j.state from j`.execute(db);
  return rows;
}
