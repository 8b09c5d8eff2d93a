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
}

/**
 * Statistics of the jobs settled in [since, until), per workspace, in one
 * statement. `j` is the window's jobs (the range scan of jobs_settled or
 * jobs_workspace_settled, migration 0017) and `l` their leases (probed by
 * leases_job); both are materialized once and every figure is aggregated
 * from them. Wait is enqueue to the first lease; run is the last lease to
 * the settlement; a lease loss is a lease that ended expired, a timeout one
 * that ended timed_out; a runner's busy time sums its leases' lengths.
 * Measured on 1,000,000 jobs in docs/performance.md ("Stats").
 */
export async function jobStats(db: Kysely<Database>, query: StatsQuery): Promise<WorkspaceStats[]> {
  const { rows } = await statsStatement(query).execute(db);
  const durations = (d: StatsRow["wait"]): DurationStats => ({ count: Number(d.count), p50Seconds: d.p50 ?? 0, p95Seconds: d.p95 ?? 0, maxSeconds: d.max ?? 0 });
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
  }));
}

/** The stats statement of jobStats, unexecuted (bench/stats-scale.ts explains it). */
export function statsStatement(query: StatsQuery): RawBuilder<StatsRow> {
  const scope = query.workspaceId ? sql`and j.workspace_id = ${query.workspaceId}` : sql``;
  return sql<StatsRow>`
    with j as materialized (
      select j.id, j.workspace_id, j.state, j.attempts, j.created_at, j.settled_at,
        case when j.state = 'failed' then coalesce(j.error->>'code', j.failure_reason, 'unknown') end as error_code
      from jobs j
      where j.settled_at >= ${query.since} and j.settled_at < ${query.until} ${scope}
    ),
    l as materialized (
      select l.job_id, l.workspace_id, l.runner_id, l.issued_at, l.end_reason,
        extract(epoch from coalesce(l.ended_at, least(l.expires_at, now())) - l.issued_at)::float8 as held
      from j join leases l on l.job_id = j.id
    ),
    per_job as (
      select job_id, min(issued_at) as first_issued, max(issued_at) as last_issued,
        count(*) filter (where end_reason = 'expired') as lost,
        count(*) filter (where end_reason = 'timed_out') as timed_out
      from l group by job_id
    ),
    measured as (
      select j.workspace_id, j.state, j.attempts, p.lost, p.timed_out,
        extract(epoch from p.first_issued - j.created_at)::float8 as wait,
        extract(epoch from j.settled_at - p.last_issued)::float8 as run
      from j left join per_job p on p.job_id = j.id
    ),
    totals as (
      select workspace_id, count(*)::int as jobs, sum(attempts)::int as attempts,
        coalesce(sum(lost), 0)::int as lease_losses, coalesce(sum(timed_out), 0)::int as timeouts,
        (count(*) filter (where state = 'cancelled'))::int as cancels,
        json_build_object('count', count(wait), 'p50', percentile_cont(0.5) within group (order by wait),
          'p95', percentile_cont(0.95) within group (order by wait), 'max', max(wait)) as wait,
        json_build_object('count', count(run), 'p50', percentile_cont(0.5) within group (order by run),
          'p95', percentile_cont(0.95) within group (order by run), 'max', max(run)) as run
      from measured group by workspace_id
    ),
    states as (select workspace_id, state as key, count(*)::int as n from j group by 1, 2),
    codes as (select workspace_id, error_code as key, count(*)::int as n from j where error_code is not null group by 1, 2),
    runner_use as (select workspace_id, runner_id, count(distinct job_id)::int as jobs, sum(held) as busy from l group by 1, 2)
    select t.*,
      coalesce((select json_agg(json_build_object('key', s.key, 'count', s.n) order by s.key) from states s where s.workspace_id = t.workspace_id), '[]') as by_state,
      coalesce((select json_agg(json_build_object('key', c.key, 'count', c.n) order by c.n desc, c.key) from codes c where c.workspace_id = t.workspace_id), '[]') as by_error_code,
      coalesce((select json_agg(json_build_object('runnerId', u.runner_id, 'jobs', u.jobs, 'busySeconds', u.busy) order by u.runner_id) from runner_use u where u.workspace_id = t.workspace_id), '[]') as runners
    from totals t
    order by t.workspace_id`;
}

/** json columns come back parsed from pg and PGlite alike, but a driver may hand text. */
function parsed<T>(value: T | string): T {
  return typeof value === "string" ? (JSON.parse(value) as T) : value;
}
