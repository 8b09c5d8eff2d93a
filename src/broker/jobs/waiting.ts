import { sql, type Kysely, type RawBuilder } from "kysely";
import type { Database } from "../../store/schema.js";
import type { JobSnapshot } from "./snapshot.js";
import { liveLeaseRow, qualifier, type JobsAlias } from "../leases/sql-fragments.js";

/** Why a queued job waits: the wire's JobWaiting (proto3 JSON names). */
export interface JobWaiting {
  readonly code:
    | "workspace_paused"
    | "scheduled"
    | "backoff"
    | "no_runner"
    | "missing_labels"
    | "unmet_requirements"
    | "runners_paused"
    | "runners_not_connected"
    | "concurrency_group"
    | "all_busy";
  readonly message: string;
  readonly missingLabels?: readonly string[];
  readonly busyRunners?: number;
  readonly busySlots?: number;
  /** scheduled, backoff: when the job becomes claimable (RFC 3339). */
  readonly until?: string;
  readonly concurrencyKey?: string;
  readonly concurrencyRunning?: number;
  /** unmet_requirements: e.g. "architecture arm64". */
  readonly unmetRequirement?: string;
}

/** A job's requirements as its snapshot shows them. */
interface Requirements {
  readonly architecture?: string;
  readonly os?: string;
  readonly executionKind?: string;
  readonly features?: readonly string[];
}

interface RunnerFit {
  readonly runner_id: string;
  readonly slots: number;
  /** How many of the job's labels it lacks. */
  readonly missing: string[];
  readonly paused: boolean;
  /** Seen within the lease length, or holding a live lease (a busy runner renews but may not claim). */
  readonly connected: boolean;
  readonly live_leases: number;
  /** Meets every requirement of the job (forelead_meets_requirements, migration 0019). */
  readonly meets: boolean;
  /** The job's requirements, one at a time ("architecture arm64"), that it does not meet. */
  readonly unmet: string[];
}

/** A runner's capabilities, as forelead_meets_requirements takes them after the job's. */
const capabilities = sql`r.architecture, r.os, r.execution_kinds, r.features`;

/** Joined to `runners r`: `live.n`, the runner's live leases (the live-lease rule of lease-sql.ts). */
const liveLeases = sql`cross join lateral (select count(*)::int as n from leases l where l.workspace_id = r.workspace_id and l.runner_id = r.runner_id and ${liveLeaseRow("l")}) live`;

/** Seen within the lease length, or holding a live lease (a busy runner renews but may not claim). */
function connectedRunner(leaseSeconds: number): RawBuilder<boolean> {
  return sql<boolean>`(r.last_seen_at > now() - make_interval(secs => ${leaseSeconds}) or live.n > 0)`;
}

/**
 * Whether a runner can take the job (the jobs row `alias`) now, as an
 * expression: it is due, its workspace is not paused, its concurrency group
 * has room, and some runner of the workspace is registered, unpaused,
 * connected, has the labels, meets every requirement and has a free slot —
 * exactly when jobWaiting finds no reason. Stops at the first such runner.
 * A column of the enqueue's own statement (Broker.enqueue), so the usual
 * reply costs no statement of its own.
 */
export function runnableNow(alias: JobsAlias, leaseSeconds: number): RawBuilder<boolean> {
  const j = qualifier(alias); // "alias."
  return sql<boolean>`(${j}claimable_at <= now()
    and not exists (select 1 from workspace_pauses p where p.workspace_id = ${j}workspace_id)
    and (${j}concurrency_key is null or forelead_group_running(${j}workspace_id, ${j}concurrency_key) < ${j}concurrency_limit)
    and exists (
      select 1 from runners r ${liveLeases}
      where r.workspace_id = ${j}workspace_id and r.retired_at is null and r.paused_at is null
        and r.labels @> ${j}labels
        and forelead_meets_requirements(${j}req_architecture, ${j}req_os, ${j}req_execution_kind, ${j}req_features, ${capabilities})
        and ${connectedRunner(leaseSeconds)} and live.n < r.slots
    ))`;
}

/** runnableNow for a stored job, by id, in a statement of its own. */
async function jobRunnableNow(
  db: Kysely<Database>,
  jobId: string,
  leaseSeconds: number,
): Promise<boolean> {
  const { rows } = await sql<{
    runnable: boolean;
  }>`select ${runnableNow("j", leaseSeconds)} as runnable from jobs j where j.id = ${jobId}`.execute(
    db,
  );
  return rows[0]?.runnable === true;
}

/**
 * Why the queued job `job` is not running, or undefined when a registered,
 * unpaused, connected runner with the labels has a free slot (it is about
 * to be claimed). The first reason that holds, in the order an operator
 * fixes them: the workspace is paused; the job is not due yet (scheduled, or
 * in its retry backoff); no runner is registered there; none has the labels;
 * none of those meets the job's requirements; every matching one is paused;
 * none of them was seen within `leaseSeconds` (the broker's lease length);
 * the job's concurrency group is full; every one is busy. Three queries:
 * the workspace's pause, its non-retired runners, each with the labels it
 * lacks, the requirements it does not meet (the claim's rule,
 * forelead_meets_requirements, one requirement at a time) and its live
 * leases (the live-lease rule of lease-sql.ts), and the group's running jobs
 * (forelead_group_running, the claim's count). First, whether the job is
 * runnable now at all (runnableNow): `runnable` when the caller's own
 * statement asked it, else a statement of its own.
 */
export async function jobWaiting(
  db: Kysely<Database>,
  job: JobSnapshot,
  leaseSeconds: number,
  runnable?: boolean,
): Promise<JobWaiting | undefined> {
  if (job.state !== "queued") return undefined;
  const workspaceId = String(job.workspaceId);
  const labels = (job.labels as string[] | undefined) ?? [];
  const req = (job.requirements as Requirements | undefined) ?? {};
  const claimableAt = typeof job.claimableAt === "string" ? new Date(job.claimableAt) : undefined;
  const groupKey = typeof job.concurrencyKey === "string" ? job.concurrencyKey : undefined;
  const limit = Number(job.concurrencyLimit ?? 0);
  const due = !claimableAt || claimableAt.getTime() <= Date.now();
  // The common case, a job a runner can take now: answered by the caller's statement (`runnable`), or
  // by one that stops at the first such runner.
  if (due && (runnable ?? (await jobRunnableNow(db, String(job.id), leaseSeconds))))
    return undefined;
  const wanted: Array<[string, RawBuilder<unknown>]> = [
    ...(req.architecture
      ? [
          [
            `architecture ${req.architecture}`,
            sql`${req.architecture}::text, null, null, '{}'::text[]`,
          ] as [string, RawBuilder<unknown>],
        ]
      : []),
    ...(req.os
      ? [
          [`os ${req.os}`, sql`null, ${req.os}::text, null, '{}'::text[]`] as [
            string,
            RawBuilder<unknown>,
          ],
        ]
      : []),
    ...(req.executionKind
      ? [
          [
            `executionKind ${req.executionKind}`,
            sql`null, null, ${req.executionKind}::text, '{}'::text[]`,
          ] as [string, RawBuilder<unknown>],
        ]
      : []),
    ...(req.features ?? []).map(
      (f) =>
        [`feature ${f}`, sql`null, null, null, array[${f}::text]`] as [string, RawBuilder<unknown>],
    ),
  ];
  const unmet = wanted.length
    ? sql`array_remove(array[${sql.join(wanted.map(([name, args]) => sql`case when forelead_meets_requirements(${args}, ${capabilities}) then null else ${name}::text end`))}], null)`
    : sql`'{}'::text[]`;
  const [pause, runners, groupRunning] = await Promise.all([
    db
      .selectFrom("workspace_pauses")
      .select(["paused_at", "paused_by", "reason"])
      .where("workspace_id", "=", workspaceId)
      .executeTakeFirst(),
    sql<RunnerFit>`
      select r.runner_id, r.slots, r.paused_at is not null as paused,
        array(select x from unnest(${labels}::text[]) x where not x = any(r.labels) order by x) as missing,
        live.n as live_leases,
        cardinality(${unmet}) = 0 as meets, ${unmet} as unmet,
        ${connectedRunner(leaseSeconds)} as connected
      from runners r ${liveLeases}
      where r.workspace_id = ${workspaceId} and r.retired_at is null
      order by r.runner_id`
      .execute(db)
      .then((r) => r.rows),
    groupKey
      ? sql<{ n: number }>`select forelead_group_running(${workspaceId}, ${groupKey}) as n`
          .execute(db)
          .then((r) => Number(r.rows[0]!.n))
      : Promise.resolve(0),
  ]);
  const ws = JSON.stringify(workspaceId);
  if (pause) {
    const why = pause.reason ? ` (${pause.reason})` : "";
    return {
      code: "workspace_paused",
      message: `workspace ${ws} is paused since ${new Date(pause.paused_at).toISOString()} by ${pause.paused_by}${why}: its queued jobs are not claimed; resume it (POST /v1/admin/workspaces/${workspaceId}/resume) to let runners take them`,
    };
  }
  if (!due && claimableAt) {
    const until = claimableAt.toISOString();
    return Number(job.attempts ?? 0) > 0
      ? {
          code: "backoff",
          until,
          message: `the job failed attempt ${Number(job.attempts)} and waits out its retry backoff: it is claimable again at ${until}`,
        }
      : {
          code: "scheduled",
          until,
          message: `the job is scheduled: it is claimable from ${until} (its runAt or delaySeconds)`,
        };
  }
  if (runners.length === 0) {
    return {
      code: "no_runner",
      message: `no runner is registered in workspace ${ws}: enroll one there (forelead runner enroll with a grant for ${ws}), or check the job's workspaceId for a typo`,
    };
  }
  const matching = runners.filter((r) => r.missing.length === 0);
  if (matching.length === 0) {
    const closest = runners.reduce((best, r) =>
      r.missing.length < best.missing.length ? r : best,
    );
    const missing = closest.missing.join(",");
    return {
      code: "missing_labels",
      message: `no runner in workspace ${ws} has labels ${labels.join(",")}; the closest, ${JSON.stringify(closest.runner_id)}, lacks ${missing}: register one with --labels including ${missing}, or drop the label from the job`,
      missingLabels: closest.missing,
    };
  }
  const meeting = matching.filter((r) => r.meets);
  if (meeting.length === 0) {
    // The first requirement no labelled runner meets; else (each is met by some runner, none meets all) the closest runner's first.
    const unmetByAll = wanted
      .map(([name]) => name)
      .find((name) => matching.every((r) => r.unmet.includes(name)));
    const closest = matching.reduce((best, r) => (r.unmet.length < best.unmet.length ? r : best));
    const unmetRequirement = unmetByAll ?? closest.unmet[0]!;
    const message = unmetByAll
      ? `no runner with ${unmetByAll} in workspace ${ws}${labels.length ? ` among those with labels ${labels.join(",")}` : ""}: register one that has it, or drop it from the job's requirements`
      : `no runner in workspace ${ws} meets all of the job's requirements; the closest, ${JSON.stringify(closest.runner_id)}, lacks ${closest.unmet.join(", ")}`;
    return { code: "unmet_requirements", message, unmetRequirement };
  }
  const unpaused = meeting.filter((r) => !r.paused);
  if (unpaused.length === 0) {
    return {
      code: "runners_paused",
      message: `every runner in workspace ${ws} with the job's labels is paused (${matching.map((r) => r.runner_id).join(", ")}); resume one (POST /v1/admin/runners/{runnerId}/resume)`,
    };
  }
  const connected = unpaused.filter((r) => r.connected);
  if (connected.length === 0) {
    return {
      code: "runners_not_connected",
      message: `runners in workspace ${ws} have the job's labels (${unpaused.map((r) => r.runner_id).join(", ")}) but none was seen in the last ${leaseSeconds} s: start one, or check its network and certificate (its log says why it cannot reach the control plane)`,
    };
  }
  if (groupKey && groupRunning >= limit) {
    return {
      code: "concurrency_group",
      message: `concurrency group ${JSON.stringify(groupKey)} is full: ${groupRunning} of at most ${limit} running in workspace ${ws}; the job runs when one of them ends (the group's queued jobs go oldest first)`,
      concurrencyKey: groupKey,
      concurrencyRunning: groupRunning,
    };
  }
  if (connected.every((r) => r.live_leases >= r.slots)) {
    const busySlots = connected.reduce((n, r) => n + r.slots, 0);
    return {
      code: "all_busy",
      message: `all ${connected.length} matching runner${connected.length === 1 ? "" : "s"} in workspace ${ws} are busy (${busySlots} slot${busySlots === 1 ? "" : "s"} in use); the job runs when one frees a slot, or add a runner or slots`,
      busyRunners: connected.length,
      busySlots,
    };
  }
  return undefined;
}

/** The snapshot with its `waiting` set when the job is queued and waits for a reason. */
export async function withWaiting(
  db: Kysely<Database>,
  job: JobSnapshot,
  leaseSeconds: number,
  runnable?: boolean,
): Promise<JobSnapshot> {
  const waiting = await jobWaiting(db, job, leaseSeconds, runnable);
  return waiting ? { ...job, waiting } : job;
}
