import { sql, type Kysely, type RawBuilder } from "kysely";
import type { Database } from "../store/schema.js";

/** Percentiles of one duration, in seconds. */
export interface DurationStats {
  readonly count: number;
  readonly p50Seconds: number;
  readonly p95Seconds: number;
  readonly maxSeconds: number;
}

/** One workspace's jobs settled in a window. */
export interface WorkspaceStats {
  readonly workspaceId: string;
  readonly jobs: number;
  readonly byState: ReadonlyArray<{ key: string; count: number }>;
  readonly byErrorCode: ReadonlyArray<{ key: string; count: number }>;
  readonly attempts: number;
  readonly leaseLosses: number;
  readonly timeouts: number;
  readonly cancels: number;
  readonly wait: DurationStats;
  readonly run: DurationStats;
  readonly runners: ReadonlyArray<{ runnerId: string; jobs: number; busySeconds: number }>;
  /** Per fairness key: its jobs that started, and their waits' p50 and p95 (seconds). */
  readonly fairnessKeys: ReadonlyArray<FairnessKeyStats>;
}

/** One fairness key's share of a workspace's settled jobs. */
interface FairnessKeyStats {
  readonly key: string;
  readonly started: number;
  readonly waitP50Seconds: number;
  readonly waitP95Seconds: number;
}

/** The window and scope of a stats request. */
export interface StatsQuery {
  readonly since: Date;
  readonly until: Date;
  /** Empty: every workspace. */
  readonly workspaceId: string;
}

/** One row of the stats statement: a workspace, its lists as json. */
export interface StatsRow {
  workspace_id: string;
  jobs: number;
  attempts: number;
  lease_losses: number;
  timeouts: number;
  cancels: number;
  wait: { count: number; p50: number | null; p95: number | null; max: number | null };
  run: { count: number; p50: number | null; p95: number | null; max: number | null };
  by_state: Array<{ key: string; count: number }>;
  by_error_code: Array<{ key: string; count: number }>;
  runners: Array<{ runnerId: string; jobs: number; busySeconds: number }>;
  fairness_keys: Array<FairnessKeyStats>;
}

/**
 * Statistics of the jobs settled in [since, until), per workspace, in one
 * statement. `j` is the window's jobs (the range scan of jobs_settled or
 * jobs_workspace_settled) and `l` their leases (probed by
 * leases_job_stats); both are materialized once and every figure is aggregated
 * from them. Wait is enqueue to the first lease; run is the last lease to
 * the settlement; a lease loss is a lease that ended expired, a timeout one
 * that ended timed_out; a runner's busy time sums its leases' lengths.
 * Measured on 1,000,000 jobs in docs/performance.md ("Stats").
 */
export async function jobStats(db: Kysely<Database>, query: StatsQuery): Promise<WorkspaceStats[]> {
  const rows = await db.transaction().execute(async (trx) => {
    await statsSettings(trx);
    return (await statsStatement(query).execute(trx)).rows;
  });
  const durations = (d: StatsRow["wait"]): DurationStats => ({
    count: Number(d.count),
    p50Seconds: d.p50 ?? 0,
    p95Seconds: d.p95 ?? 0,
    maxSeconds: d.max ?? 0,
  });
  return rows.map((r) => ({
    workspaceId: r.workspace_id,
    jobs: r.jobs,
    byState: parsed(r.by_state),
    byErrorCode: parsed(r.by_error_code),
    attempts: r.attempts,
    leaseLosses: r.lease_losses,
    timeouts: r.timeouts,
    cancels: r.cancels,
    wait: durations(parsed(r.wait)),
    run: durations(parsed(r.run)),
    runners: parsed(r.runners),
    fairnessKeys: parsed(r.fairness_keys),
  }));
}

/**
 * The settings the stats statement runs with, for its transaction only.
 * JIT off: on 1,000,000 jobs Postgres spent 3.4 s of a 9 s run compiling
 * the statement (its cost is far past jit_above_cost), for a statement run
 * once. work_mem 64 MB: the window's per-job rows (about 116,000 for 7 days
 * there) sort and hash in memory instead of spilling to temp files.
 */
export async function statsSettings(trx: Kysely<Database>): Promise<void> {
  await sql`select set_config('jit', 'off', true), set_config('work_mem', '64MB', true)`.execute(
    trx,
  );
}

/** The stats statement of jobStats, unexecuted (bench/stats-scale.ts explains it). */
export function statsStatement(query: StatsQuery): RawBuilder<StatsRow> {
  const scope = query.workspaceId ? sql`and j.workspace_id = ${query.workspaceId}` : sql``;
  return sql<StatsRow>`
    with jl as materialized (
      select j.id, j.workspace_id, j.state, j.attempts, j.created_at, j.settled_at, j.fairness_key,
        case when j.state = 'failed' then coalesce(j.error->>'code', j.failure_reason, 'unknown') end as error_code,
        l.runner_id, l.issued_at, l.end_reason,
        extract(epoch from coalesce(l.ended_at, least(l.expires_at, now())) - l.issued_at)::float8 as held
      from jobs j left join leases l on l.job_id = j.id
      where j.settled_at >= ${query.since} and j.settled_at < ${query.until} ${scope}
    ),
    per_job as materialized (
      select workspace_id, state, attempts, error_code, fairness_key,
        extract(epoch from min(issued_at) - created_at)::float8 as wait,
        extract(epoch from settled_at - max(issued_at))::float8 as run,
        count(*) filter (where end_reason = 'expired') as lost,
        count(*) filter (where end_reason = 'timed_out') as timed_out
      from jl group by id, workspace_id, state, attempts, error_code, fairness_key, created_at,
        settled_at
    ),
    totals as (
      select workspace_id, count(*)::int as jobs, sum(attempts)::int as attempts,
        sum(lost)::int as lease_losses, sum(timed_out)::int as timeouts,
        (count(*) filter (where state = 'cancelled'))::int as cancels,
        json_build_object('count', count(wait), 'p50', percentile_cont(0.5) within group (order by wait),
          'p95', percentile_cont(0.95) within group (order by wait), 'max', max(wait)) as wait,
        json_build_object('count', count(run), 'p50', percentile_cont(0.5) within group (order by run),
          'p95', percentile_cont(0.95) within group (order by run), 'max', max(run)) as run
      from per_job group by workspace_id
    ),
    states as (
      select workspace_id, json_agg(json_build_object('key', key, 'count', n) order by key) as by_state
      from (select workspace_id, state as key, count(*)::int as n from per_job group by 1, 2) s group by workspace_id
    ),
    codes as (
      select workspace_id, json_agg(json_build_object('key', key, 'count', n) order by n desc, key) as by_error_code
      from (select workspace_id, error_code as key, count(*)::int as n from per_job where error_code
        is not null group by 1, 2) c group by workspace_id
    ),
    fair as (
      select workspace_id, json_agg(json_build_object('key', fairness_key, 'started', n,
        'waitP50Seconds', p50, 'waitP95Seconds', p95) order by fairness_key) as fairness_keys
      from (
        select workspace_id, fairness_key, count(wait)::int as n,
          coalesce(percentile_cont(0.5) within group (order by wait), 0) as p50,
          coalesce(percentile_cont(0.95) within group (order by wait), 0) as p95
        from per_job where fairness_key is not null group by 1, 2
      ) f group by workspace_id
    ),
    runner_use as (
      select workspace_id, json_agg(json_build_object('runnerId', runner_id, 'jobs', jobs,
        'busySeconds', busy) order by runner_id) as runners
      from (
        select workspace_id, runner_id, count(distinct id)::int as jobs, sum(held) as busy
        from jl where runner_id is not null group by 1, 2
      ) u group by workspace_id
    )
    select t.*, coalesce(s.by_state, '[]') as by_state, coalesce(c.by_error_code, '[]') as
      by_error_code, coalesce(u.runners, '[]') as runners,
      coalesce(f.fairness_keys, '[]') as fairness_keys
    from totals t
    left join states s using (workspace_id)
    left join codes c using (workspace_id)
    left join runner_use u using (workspace_id)
    left join fair f using (workspace_id)
    order by t.workspace_id`;
}

/** json columns come back parsed from pg and PGlite alike, but a driver may hand text. */
function parsed<T>(value: T | string): T {
  return typeof value === "string" ? (JSON.parse(value) as T) : value;
}
