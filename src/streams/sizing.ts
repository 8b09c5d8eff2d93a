import { sql, type Kysely } from "kysely";
import type { Database } from "../store/schema.js";

/**
 * The sizing rule, in one place. A group's request is compared with the
 * 95th percentile of its jobs' peaks:
 *
 * - raise when the p95 peak is over 90% of the request (jobs run at the
 *   limit: throttled CPU, or close to being killed for memory);
 * - lower when the p95 peak is under 50% of the request (the runner keeps
 *   capacity free that the jobs never use);
 * - fits in between;
 * - set when the jobs request nothing (0: no limit).
 *
 * Raise, lower and set suggest the p95 peak plus 20% headroom, rounded up:
 * CPU to a tenth of a core, memory to a whole 16 MiB.
 */
export const sizingRule = {
  raiseAbove: 0.9,
  lowerBelow: 0.5,
  headroom: 0.2,
  cpuStep: 0.1,
  memoryStep: 16 * 1024 * 1024,
} as const;

/** What to do with one request. */
type Advice = "raise" | "lower" | "fits" | "set";

/** The advice on one request: CPU in cores or memory in bytes. */
export interface ResourceAdvice {
  readonly requested: number;
  readonly p95Peak: number;
  readonly maxPeak: number;
  readonly advice: Advice;
  /** What to request instead; the request itself when it fits. */
  readonly suggested: number;
}

/**
 * Applies sizingRule to one request; `step` is the rounding unit (sizingRule.cpuStep or
 * memoryStep).
 */
export function adviseOn(
  requested: number,
  p95Peak: number,
  maxPeak: number,
  step: number,
): ResourceAdvice {
  // Rounded to the step (with a guard against float noise such as 0.30000000000000004 / 0.1), never
  // below one step.
  const suggested = Math.max(
    step,
    Math.ceil(Number(((p95Peak * (1 + sizingRule.headroom)) / step).toFixed(6))) * step,
  );
  const round = (n: number) => Number(n.toFixed(step < 1 ? 1 : 0));
  const at = (advice: Advice, value: number): ResourceAdvice => ({
    requested,
    p95Peak,
    maxPeak,
    advice,
    suggested: round(value),
  });
  if (requested <= 0) return at("set", suggested);
  if (p95Peak > requested * sizingRule.raiseAbove) return at("raise", suggested);
  if (p95Peak < requested * sizingRule.lowerBelow && suggested < requested)
    return at("lower", suggested);
  return at("fits", requested);
}

/** The settled jobs of one workspace, label set and image, and the advice on their requests. */
export interface SizingGroup {
  readonly workspaceId: string;
  readonly labels: readonly string[];
  readonly image: string;
  /** Jobs in the group with at least one sample. */
  readonly jobs: number;
  readonly cpu: ResourceAdvice;
  readonly memory: ResourceAdvice;
}

/** Which settled jobs to size. */
export interface SizingQuery {
  readonly since: Date;
  /** Only this workspace; every one when empty. */
  readonly workspaceId: string;
}

/**
 * Sizing of the jobs settled since `since`, computed in one statement: each
 * job's peaks (its job_peaks row, kept as samples are stored), then per
 * workspace, labels and image the p95 and max of those peaks and the request
 * of the group's newest job (the request now in use, which the advice is
 * about). Jobs are found by settled_at (index jobs_settled); measured in
 * docs/streams.md ("Resource samples and sizing").
 */
export async function sizing(db: Kysely<Database>, q: SizingQuery): Promise<SizingGroup[]> {
  const workspace = q.workspaceId ? sql`and jobs.workspace_id = ${q.workspaceId}` : sql``;
  // spec.cpu is a JSON number; spec.memoryBytes is stored as a decimal string (an int64 in proto3
  // JSON).
  const specNumber = (field: string) =>
    sql<number>`case when jsonb_typeof(jobs.spec->${field}) in ('number', 'string') and
      (jobs.spec->>${field}) ~ '^[0-9]+([.][0-9]+)?$' then (jobs.spec->>${field})::float8 else 0 end`;
  const { rows } = await sql<{
    workspace_id: string;
    labels: string[];
    image: string;
    jobs: number;
    requested_cpu: number;
    requested_memory: number;
    p95_cpu: number;
    max_cpu: number;
    p95_memory: number;
    max_memory: number;
  }>`
    with peaks as (
      select jobs.workspace_id, jobs.labels, coalesce(jobs.spec->>'image', '') as image, jobs.settled_at,
             ${specNumber("cpu")} as requested_cpu, ${specNumber("memoryBytes")} as requested_memory,
             job_peaks.peak_cpu_cores as peak_cpu, job_peaks.peak_memory_bytes::float8 as peak_memory
      from jobs join job_peaks on job_peaks.job_id = jobs.id
      where jobs.settled_at >= ${q.since} ${workspace}
    )
    select workspace_id, labels, image, count(*)::int as jobs,
           (array_agg(requested_cpu order by settled_at desc))[1] as requested_cpu,
           (array_agg(requested_memory order by settled_at desc))[1] as requested_memory,
           percentile_cont(0.95) within group (order by peak_cpu) as p95_cpu, max(peak_cpu) as max_cpu,
           percentile_cont(0.95) within group (order by peak_memory) as p95_memory, max(peak_memory) as max_memory
    from peaks
    group by workspace_id, labels, image
    order by workspace_id, labels, image`.execute(db);
  return rows.map((r) => ({
    workspaceId: r.workspace_id,
    labels: r.labels,
    image: r.image,
    jobs: Number(r.jobs),
    cpu: adviseOn(
      Number(r.requested_cpu),
      Number(r.p95_cpu),
      Number(r.max_cpu),
      sizingRule.cpuStep,
    ),
    memory: adviseOn(
      Number(r.requested_memory),
      Number(r.p95_memory),
      Number(r.max_memory),
      sizingRule.memoryStep,
    ),
  }));
}
