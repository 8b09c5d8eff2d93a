import { sql, type Kysely } from "kysely";
import type { Database } from "../../store/schema.js";
import { liveLeaseCount, runnerState } from "./state.js";

/** Why a group's or a kind's wantedRunners is what it is. */
type DemandReason =
  | "scale_up"
  | "below_min"
  | "at_max"
  | "free_slots"
  | "no_jobs"
  | "workspace_paused"
  | "by_group"
  | "no_group_offers";

/** A registered scaling group as its controller declared it. */
export interface ScalingGroup {
  readonly name: string;
  readonly workspaceId: string;
  readonly labels: readonly string[];
  readonly architecture: string | null;
  readonly os: string | null;
  readonly executionKinds: readonly string[];
  readonly features: readonly string[];
  readonly minRunners: number;
  readonly maxRunners: number;
  readonly slotsPerRunner: number;
  readonly idleSeconds: number;
  readonly cooldownSeconds: number;
  readonly provider: string;
  readonly controller: string;
  readonly leaseExpiresAt: Date;
}

/** What the queue and the fleet say of one group, and the runners it wants. */
export interface GroupDemand {
  readonly group: ScalingGroup;
  readonly jobsQueued: number;
  readonly jobsRunning: number;
  readonly runners: number;
  readonly runnersIdle: number;
  readonly runnersDraining: number;
  readonly slotsFree: number;
  readonly oldestWaitSeconds: number;
  readonly wantedRunners: number;
  readonly reason: DemandReason;
}

/** The demand of one kind of queued job: its workspace, labels and requirements. */
export interface KindDemand {
  readonly workspaceId: string;
  readonly labels: readonly string[];
  readonly architecture: string | null;
  readonly os: string | null;
  readonly executionKind: string | null;
  readonly features: readonly string[];
  readonly jobsQueued: number;
  readonly jobsScheduled: number;
  readonly jobsRunning: number;
  readonly runnersIdle: number;
  readonly slotsFree: number;
  readonly oldestWaitSeconds: number;
  readonly groups: readonly string[];
  readonly wantedRunners: number;
  readonly reason: DemandReason;
}

/** The inputs of a group's wantedRunners. */
interface GroupFigures {
  readonly jobsQueued: number;
  readonly slotsFree: number;
  readonly slotsPerRunner: number;
  /** The group's runners that are not offline or retired (draining ones count against max). */
  readonly runners: number;
  readonly minRunners: number;
  readonly maxRunners: number;
  readonly workspaceUnpaused: boolean;
}

/**
 * How many more runners a group needs now, and why: enough runners of slotsPerRunner for the jobs
 * the free slots do not cover (none in a paused workspace), then bounded by min and max.
 */
function wantedRunners(f: GroupFigures): { wanted: number; reason: DemandReason } {
  const shortfall = f.workspaceUnpaused ? Math.max(f.jobsQueued - f.slotsFree, 0) : 0;
  const needed = Math.ceil(shortfall / Math.max(f.slotsPerRunner, 1));
  const target = Math.min(f.maxRunners, Math.max(f.minRunners, f.runners + needed));
  const wanted = Math.max(0, target - f.runners);
  if (wanted > 0) return { wanted, reason: needed > 0 ? "scale_up" : "below_min" };
  if (!f.workspaceUnpaused && f.jobsQueued > 0) return { wanted, reason: "workspace_paused" };
  if (needed > 0) return { wanted, reason: "at_max" };
  return { wanted, reason: f.jobsQueued > 0 ? "free_slots" : "no_jobs" };
}

/**
 * Runs `read` in a transaction without JIT: at 100,000 queued jobs the statements' cost passes
 * jit_optimize_above_cost and compiling took seconds, ten times the work (docs/performance.md,
 * "Demand at 100,000 queued jobs").
 */
function withoutJit<T>(db: Kysely<Database>, read: (trx: Kysely<Database>) => Promise<T>) {
  return db.transaction().execute(async (trx) => {
    await sql`select set_config('jit', 'off', true)`.execute(trx);
    return read(trx);
  });
}

/** Demand of every registered group and every kind of queued job, optionally of one workspace. */
export function readDemand(
  db: Kysely<Database>,
  offlineSeconds: number,
  workspaceId = "",
): Promise<{ groups: GroupDemand[]; kinds: KindDemand[] }> {
  return withoutJit(db, async (trx) => ({
    groups: await groupDemand(trx, offlineSeconds, { workspaceId }),
    kinds: await kindDemand(trx, offlineSeconds, workspaceId),
  }));
}

/** Every registered group's demand (the metrics' gauges per group). */
export function readGroupsDemand(
  db: Kysely<Database>,
  offlineSeconds: number,
): Promise<GroupDemand[]> {
  return withoutJit(db, (trx) => groupDemand(trx, offlineSeconds, {}));
}

/** One registered group's demand, or undefined when no group has that name. */
export async function readGroupDemand(
  db: Kysely<Database>,
  offlineSeconds: number,
  name: string,
): Promise<GroupDemand | undefined> {
  return (await withoutJit(db, (trx) => groupDemand(trx, offlineSeconds, { name })))[0];
}

/**
 * The runners of the workspace `ws` (a SQL expression) that are not retired, with their live
 * leases (n) and state (forelead_runner_state).
 */
function liveRunners(ws: ReturnType<typeof sql.ref>, offlineSeconds: number) {
  return sql`(select r.*, ${liveLeaseCount("r")} as n,
      ${runnerState("r", liveLeaseCount("r"), offlineSeconds)} as state
    from runners r where r.workspace_id = ${ws} and r.retired_at is null)`;
}

/**
 * Each group's figures in one statement. Its jobs are those of its workspace that the claim's
 * clauses give to a runner offering what the group offers: forelead_job_due,
 * forelead_labels_match and forelead_meets_requirements against the group's labels and
 * capabilities; a concurrency group's jobs count up to its room (forelead_group_running). Free
 * slots are those of idle and busy runners (forelead_runner_state) of the workspace offering at
 * least what the group offers (the same two functions, the group in the job's place). The group's
 * own runners are those whose id starts with "NAME-".
 */
async function groupDemand(
  db: Kysely<Database>,
  offlineSeconds: number,
  where: { workspaceId?: string; name?: string },
): Promise<GroupDemand[]> {
  const ws = where.workspaceId ?? "";
  const name = where.name ?? "";
  const { rows } = await sql<{
    name: string;
    workspace_id: string;
    labels: string[];
    architecture: string | null;
    os: string | null;
    execution_kinds: string[];
    features: string[];
    min_runners: number;
    max_runners: number;
    slots_per_runner: number;
    idle_seconds: number;
    cooldown_seconds: number;
    provider: string;
    controller: string;
    lease_expires_at: Date;
    unpaused: boolean;
    jobs_queued: number;
    oldest_seconds: number | null;
    jobs_running: number;
    runners: number;
    runners_idle: number;
    runners_draining: number;
    slots_free: number;
  }>`
    select g.*, w.unpaused, q.jobs_queued, q.oldest_seconds, m.*,
      (select count(*)::int from jobs j where j.workspace_id = g.workspace_id
        and j.state = 'running' and starts_with(j.runner_id, g.name || '-')) as jobs_running
    from scaling_groups g
    cross join lateral forelead_workspace_unpaused(g.workspace_id) w
    cross join lateral (
      select coalesce(sum(case when k.concurrency_key is null then k.n
          else least(k.n, greatest(k.room, 0)) end), 0)::int as jobs_queued,
        extract(epoch from now() - min(k.oldest))::float8 as oldest_seconds
      from (
        select j.concurrency_key, count(*)::int as n, min(j.claimable_at) as oldest,
          max(j.concurrency_limit) - forelead_group_running(g.workspace_id, j.concurrency_key)
            as room
        from jobs j
        where j.workspace_id = g.workspace_id and j.state = 'queued'
          and forelead_job_due(j.claimable_at)
          and forelead_labels_match(j.labels, g.labels)
          and forelead_meets_requirements(j.req_architecture, j.req_os, j.req_execution_kind,
            j.req_features, g.architecture, g.os, g.execution_kinds, g.features)
        group by j.concurrency_key
      ) k
    ) q
    cross join lateral (
      select
        count(*) filter (where r.member and r.state <> 'offline')::int as runners,
        count(*) filter (where r.member and r.state = 'idle')::int as runners_idle,
        count(*) filter (where r.member and r.state = 'draining')::int as runners_draining,
        coalesce(sum(greatest(r.slots - r.n, 0)) filter (where r.state in ('idle', 'busy')
          and forelead_labels_match(g.labels, r.labels)
          and forelead_meets_requirements(g.architecture, g.os, null, g.features,
            r.architecture, r.os, r.execution_kinds, r.features)), 0)::int as slots_free
      from (select l.*, starts_with(l.runner_id, g.name || '-') as member
        from ${liveRunners(sql.ref("g.workspace_id"), offlineSeconds)} l) r
    ) m
    where (${ws} = '' or g.workspace_id = ${ws}) and (${name} = '' or g.name = ${name})
    order by g.name`.execute(db);
  return rows.map((r) => {
    const { wanted, reason } = wantedRunners({
      jobsQueued: r.jobs_queued,
      slotsFree: r.slots_free,
      slotsPerRunner: r.slots_per_runner,
      runners: r.runners,
      minRunners: r.min_runners,
      maxRunners: r.max_runners,
      workspaceUnpaused: r.unpaused,
    });
    return {
      group: {
        name: r.name,
        workspaceId: r.workspace_id,
        labels: r.labels,
        architecture: r.architecture,
        os: r.os,
        executionKinds: r.execution_kinds,
        features: r.features,
        minRunners: r.min_runners,
        maxRunners: r.max_runners,
        slotsPerRunner: r.slots_per_runner,
        idleSeconds: r.idle_seconds,
        cooldownSeconds: r.cooldown_seconds,
        provider: r.provider,
        controller: r.controller,
        leaseExpiresAt: r.lease_expires_at,
      },
      jobsQueued: r.jobs_queued,
      jobsRunning: r.jobs_running,
      runners: r.runners,
      runnersIdle: r.runners_idle,
      runnersDraining: r.runners_draining,
      slotsFree: r.slots_free,
      oldestWaitSeconds: Math.max(0, r.oldest_seconds ?? 0),
      wantedRunners: wanted,
      reason,
    };
  });
}

/**
 * Each kind of queued job (workspace, labels, requirements) in one statement: its jobs due
 * (forelead_job_due) and not, the runners that could take it (forelead_labels_match and
 * forelead_meets_requirements against each idle or busy runner, forelead_runner_state) and their
 * free slots, and the groups offering it (the same two functions against the group).
 */
async function kindDemand(
  db: Kysely<Database>,
  offlineSeconds: number,
  workspaceId: string,
): Promise<KindDemand[]> {
  const { rows } = await sql<{
    workspace_id: string;
    labels: string[];
    req_architecture: string | null;
    req_os: string | null;
    req_execution_kind: string | null;
    req_features: string[];
    queued: number;
    scheduled: number;
    oldest_seconds: number | null;
    running: number;
    runners_idle: number;
    slots_free: number;
    groups: string[];
    has_groups: boolean;
    unpaused: boolean;
  }>`
    select k.*, w.unpaused,
      (select count(*)::int from jobs j where j.workspace_id = k.workspace_id
        and j.state = 'running' and j.labels = k.labels
        and j.req_architecture is not distinct from k.req_architecture
        and j.req_os is not distinct from k.req_os
        and j.req_execution_kind is not distinct from k.req_execution_kind
        and j.req_features = k.req_features) as running,
      m.runners_idle, m.slots_free,
      coalesce((select array_agg(g.name order by g.name) from scaling_groups g
        where g.workspace_id = k.workspace_id and forelead_labels_match(k.labels, g.labels)
          and forelead_meets_requirements(k.req_architecture, k.req_os, k.req_execution_kind,
            k.req_features, g.architecture, g.os, g.execution_kinds, g.features)),
        '{}') as groups,
      exists (select 1 from scaling_groups g where g.workspace_id = k.workspace_id) as has_groups
    from (
      select j.workspace_id, j.labels, j.req_architecture, j.req_os, j.req_execution_kind,
        j.req_features,
        count(*) filter (where forelead_job_due(j.claimable_at))::int as queued,
        count(*) filter (where not forelead_job_due(j.claimable_at))::int as scheduled,
        extract(epoch from now() - min(j.claimable_at)
          filter (where forelead_job_due(j.claimable_at)))::float8 as oldest_seconds
      from jobs j
      where j.state = 'queued' ${workspaceId ? sql`and j.workspace_id = ${workspaceId}` : sql``}
      group by 1, 2, 3, 4, 5, 6
    ) k
    cross join lateral forelead_workspace_unpaused(k.workspace_id) w
    cross join lateral (
      select count(*) filter (where r.state = 'idle')::int as runners_idle,
        coalesce(sum(greatest(r.slots - r.n, 0)), 0)::int as slots_free
      from ${liveRunners(sql.ref("k.workspace_id"), offlineSeconds)} r
      where r.state in ('idle', 'busy') and forelead_labels_match(k.labels, r.labels)
        and forelead_meets_requirements(k.req_architecture, k.req_os, k.req_execution_kind,
          k.req_features, r.architecture, r.os, r.execution_kinds, r.features)
    ) m
    order by k.workspace_id, k.labels, k.req_architecture, k.req_os`.execute(db);
  return rows.map((r) => {
    const shortfall = r.unpaused ? Math.max(r.queued - r.slots_free, 0) : 0;
    const wanted = r.has_groups ? 0 : shortfall;
    const reason: DemandReason =
      r.groups.length > 0
        ? "by_group"
        : r.has_groups
          ? "no_group_offers"
          : !r.unpaused && r.queued > 0
            ? "workspace_paused"
            : wanted > 0
              ? "scale_up"
              : r.queued > 0
                ? "free_slots"
                : "no_jobs";
    return {
      workspaceId: r.workspace_id,
      labels: r.labels,
      architecture: r.req_architecture,
      os: r.req_os,
      executionKind: r.req_execution_kind,
      features: r.req_features,
      jobsQueued: r.queued,
      jobsScheduled: r.scheduled,
      jobsRunning: r.running,
      runnersIdle: r.runners_idle,
      slotsFree: r.slots_free,
      oldestWaitSeconds: Math.max(0, r.oldest_seconds ?? 0),
      groups: r.groups,
      wantedRunners: wanted,
      reason,
    };
  });
}
