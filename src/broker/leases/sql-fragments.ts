import { sql, type RawBuilder, type SqlBool } from "kysely";
import { jobsChannel } from "./wakeups.js";

// The lease rules every statement on a leased job restates, written once as
// kysely fragments. Fragments, not a Postgres function: each is inlined into
// the statement that uses it, so the planner sees plain column comparisons
// (a function call in WHERE is opaque to it unless Postgres inlines it), a
// call costs nothing more, and changing a rule needs no migration. Not
// measured against a function for that reason. forelead_claim counts
// live lease rows with forelead_live_leases, in SQL these cannot reach; it
// states the rule of liveLeaseRow.

/**
 * How a statement names the jobs table: unqualified, or by one of these aliases ("ins": the
 * enqueue's inserted rows).
 */
export type JobsAlias = "jobs" | "j" | "ins";

/** How a statement names the leases table. */
export type LeasesAlias = "leases" | "l";

/** `alias.`, or nothing: a closed set of names, so it is safe to write raw. */
export function qualifier(alias: JobsAlias | LeasesAlias | undefined): RawBuilder<unknown> {
  return sql.raw(alias ? `${alias}.` : "");
}

/**
 * Which lease on a jobs row: every field given narrows the match. A value is
 * sent as a parameter; a RawBuilder (`sql.ref("i.job_id")`) is inlined, for
 * a statement that matches many leases at once.
 */
export interface LeaseMatch {
  readonly jobId?: string | RawBuilder<string>;
  readonly workspaceId?: string | RawBuilder<string>;
  readonly runnerId?: string | RawBuilder<string>;
  /** The jobs row's current lease id (leases.id). */
  readonly leaseId?: number | RawBuilder<number>;
  /** The SHA-256 of the lease token. */
  readonly token?: Buffer | RawBuilder<Buffer>;
}

/**
 * The jobs row (`alias`, unqualified without one) is running under the lease
 * `match` names, live or expired: an expired lease the sweep has not ended
 * yet still matches. Use liveLease unless the statement ends the lease anyway.
 */
export function leaseHeld(match: LeaseMatch, alias?: JobsAlias): RawBuilder<SqlBool> {
  const t = qualifier(alias);
  const parts: Array<RawBuilder<unknown>> = [];
  if (match.jobId !== undefined) parts.push(sql`${t}id = ${match.jobId}`);
  if (match.workspaceId !== undefined) parts.push(sql`${t}workspace_id = ${match.workspaceId}`);
  if (match.runnerId !== undefined) parts.push(sql`${t}runner_id = ${match.runnerId}`);
  if (match.leaseId !== undefined) parts.push(sql`${t}lease_id = ${match.leaseId}`);
  parts.push(sql`${t}state = 'running'`);
  if (match.token !== undefined) parts.push(sql`${t}lease_token_sha256 = ${match.token}`);
  return sql<SqlBool>`${sql.join(parts, sql` and `)}`;
}

/**
 * The jobs row holds the lease `match` names and that lease is live: running
 * under it and not expired as of now() (the statement's start). Every call
 * made under a lease (renew, release, complete, streams, code, uploads) is
 * guarded by this and nothing else; lease-check.ts explains a miss.
 */
export function liveLease(match: LeaseMatch, alias?: JobsAlias): RawBuilder<SqlBool> {
  return sql<SqlBool>`${leaseHeld(match, alias)} and ${qualifier(alias)}lease_expires_at > now()`;
}

/**
 * The jobs row is running under a lease that has expired (the complement of liveLease): what the
 * sweep ends.
 */
export function expiredLease(alias?: JobsAlias): RawBuilder<SqlBool> {
  return sql<SqlBool>`${leaseHeld({}, alias)} and ${qualifier(alias)}lease_expires_at <= now()`;
}

/**
 * The leases row (`alias`) is live: not ended, not expired. What counts against a runner's slots.
 */
export function liveLeaseRow(alias?: LeasesAlias): RawBuilder<SqlBool> {
  const t = qualifier(alias);
  return sql<SqlBool>`${t}ended_at is null and ${t}expires_at > now()`;
}

/**
 * The SET items that take a lease off its jobs row, whatever the job's next
 * state: no runner, no lease, no token, no expiry. Every statement that ends
 * a lease (release, complete, expire, a runner's retirement, a failed pin)
 * sets these beside the job's new state.
 */
export const clearLease = sql`runner_id = null, lease_id = null, lease_token_sha256 = null,
  lease_expires_at = null, updated_at = now()`;

/**
 * `pg_notify` on the jobs channel: a job may be claimable in `workspaceId`
 * (a value, or a column reference). With `claimableAt` (a timestamptz
 * expression) in the future, the payload is "<workspace> <epoch ms>": the
 * job becomes claimable then, and each replica's due timer (wakeups.ts)
 * wakes that workspace's waiting claims at that time.
 */
export function notifyJobs(
  workspaceId: string | RawBuilder<string>,
  claimableAt?: RawBuilder<unknown>,
): RawBuilder<string> {
  if (!claimableAt) return sql<string>`pg_notify(${jobsChannel}, ${workspaceId})`;
  return sql<string>`pg_notify(${jobsChannel}, case when ${claimableAt} > now()
    then ${workspaceId} || ' ' || floor(extract(epoch from ${claimableAt}) * 1000)::bigint else ${workspaceId} end)`;
}

/**
 * The CTE `wake`: one notification per workspace with a job in the CTE
 * `from` that is now queued (carrying the earliest claimable_at among them,
 * see notifyJobs), or that left a concurrency group (a job of the group may
 * now run), so a waiting claim there takes it. Sent in the statement that
 * queued the job, committed with it (listeners get it only at commit). A
 * SELECT in WITH runs only when referenced: select `woken` beside it. The
 * CTE must return state, workspace_id, claimable_at and concurrency_key.
 */
export function wakeWaiters(from: string): RawBuilder<unknown> {
  return sql`wake as (select ${notifyJobs(sql.ref("q.w"), sql.ref("q.at"))} from (
    select workspace_id as w, min(claimable_at) filter (where state = 'queued') as at from ${sql.table(from)}
    where state = 'queued' or concurrency_key is not null group by workspace_id) q)`;
}

/** The select item that makes `wake` run (see wakeWaiters): how many notifications it sent. */
export const woken = sql`(select count(*) from wake) as woken`;

/**
 * When a job requeued for a retry (a retryable failure, a lost lease) is
 * claimable again: now plus its backoff delay for the attempt that just
 * ended, min(max, initial * multiplier^(attempts - 1)); unchanged (so
 * claimable at once) without a backoff. The one home of the delay rule: a
 * SET item's value, over the unqualified jobs row before the update.
 */
export const retryClaimableAt = sql`case when jobs.backoff_initial_seconds is null then jobs.claimable_at
  else now() + make_interval(secs => least(jobs.backoff_max_seconds, jobs.backoff_initial_seconds *
    power(jobs.backoff_multiplier, greatest(jobs.attempts - 1, 0)))) end`;
