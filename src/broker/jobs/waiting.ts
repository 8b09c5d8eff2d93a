import { sql, type Kysely, type RawBuilder } from "kysely";
import type { Database } from "../../store/schema.js";
import type { JobSnapshot } from "./snapshot.js";
import { qualifier, type JobsAlias } from "../leases/sql-fragments.js";
import { runnerState } from "../fleet/state.js";

/** Why a queued job waits: the wire's JobWaiting (proto3 JSON names). */
interface JobWaiting {
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
    | "rate_limited"
    | "all_busy";
  readonly message: string;
  readonly missingLabels?: readonly string[];
  readonly busyRunners?: number;
  readonly busySlots?: number;
  /** scheduled, backoff: when the job becomes claimable; rate_limited: when its limit has room. */
  readonly until?: string;
  readonly concurrencyKey?: string;
  readonly concurrencyRunning?: number;
  /** unmet_requirements: e.g. "architecture arm64". */
  readonly unmetRequirement?: string;
  /** rate_limited: the rate limit holding the job. */
  readonly rateLimit?: string;
}

/** A job's requirements as its snapshot shows them. */
interface Requirements {
  readonly architecture?: string;
  readonly os?: string;
  readonly executionKind?: string;
  readonly features?: readonly string[];
}

/** The job's own claim clauses, as the database answers them for its stored row. */
interface JobClauses {
  readonly claimable_at: Date;
  readonly attempts: number;
  /** forelead_job_due */
  readonly due: boolean;
  /** forelead_workspace_unpaused, and the pause when it is not. */
  readonly workspace_unpaused: boolean;
  readonly paused_at: Date | null;
  readonly paused_by: string | null;
  readonly reason: string | null;
  readonly concurrency_key: string | null;
  readonly concurrency_limit: number | null;
  /** forelead_group_running: the job's group's running jobs (0 with no group). */
  readonly group_running: number;
  /** forelead_group_has_room */
  readonly group_room: boolean;
  readonly rate_limit: string | null;
  /** forelead_rate_limit_room at now() (true with no limit), and the limit's figures. */
  readonly rate_room: boolean;
  readonly rate_max: number | null;
  readonly rate_window: number | null;
  /** forelead_rate_limit_next: when the limit has room again. */
  readonly rate_next: Date | null;
}

/** The claim clauses of the job against one registered runner of its workspace. */
interface RunnerClauses {
  readonly runner_id: string;
  readonly slots: number;
  readonly live_leases: number;
  /** forelead_labels_match */
  readonly labels_match: boolean;
  /** The job's labels it lacks. */
  readonly missing: string[];
  /** forelead_meets_requirements */
  readonly meets: boolean;
  /** The job's requirements, one at a time ("architecture arm64"), that it does not meet. */
  readonly unmet: string[];
  /** forelead_runner_unpaused */
  readonly unpaused: boolean;
  /**
   * Seen within the lease length, or holding a live lease (a busy runner renews but may not claim).
   */
  readonly connected: boolean;
  /** forelead_slot_free */
  readonly slot_free: boolean;
}

/** A runner's capabilities, as forelead_meets_requirements takes them after the job's. */
const capabilities = sql`r.architecture, r.os, r.execution_kinds, r.features`;

/** The job's requirements (the jobs row `j`), as forelead_meets_requirements takes them first. */
const requirements = sql`j.req_architecture, j.req_os, j.req_execution_kind, j.req_features`;

/**
 * Connected, by the runner's state (forelead_runner_state, given its live leases `live.n`): not
 * offline, retired or draining. Paused is a clause of its own, asked before this one.
 */
function connectedRunner(offlineSeconds: number): RawBuilder<boolean> {
  return sql<boolean>`(${runnerState("r", sql`live.n`, offlineSeconds)} not in ('offline',
    'retired', 'draining'))`;
}

/**
 * Whether a runner can take the job (the jobs row `alias`) now, as an
 * expression: the claim's clauses (src/store/sql/functions, the ones
 * forelead_claim is written with) hold for it and some registered runner of
 * its workspace that is connected. Stops at the first such runner.
 * A column of the enqueue's own statement (Broker.enqueue), so the usual
 * reply costs no statement of its own.
 */
export function runnableNow(alias: JobsAlias, offlineSeconds: number): RawBuilder<boolean> {
  const j = qualifier(alias); // "alias."
  return sql<boolean>`(forelead_job_due(${j}claimable_at)
    and (select w.unpaused from forelead_workspace_unpaused(${j}workspace_id) w)
    and forelead_group_has_room(${j}concurrency_key, ${j}concurrency_limit,
      forelead_group_running(${j}workspace_id, ${j}concurrency_key))
    and (${j}rate_limit is null or exists (select 1 from rate_limits rl
      where rl.name = ${j}rate_limit
        and forelead_rate_limit_room(rl.starts, rl.max_starts, rl.window_seconds, now())))
    and exists (
      select 1 from runners r cross join lateral forelead_live_leases(r.workspace_id, r.runner_id) live
      where r.workspace_id = ${j}workspace_id and r.retired_at is null
        and forelead_runner_unpaused(r.paused_at)
        and forelead_labels_match(${j}labels, r.labels)
        and forelead_meets_requirements(${j}req_architecture, ${j}req_os, ${j}req_execution_kind,
          ${j}req_features, ${capabilities})
        and ${connectedRunner(offlineSeconds)}
        and forelead_slot_free(live.n, r.slots)
    ))`;
}

/** runnableNow for a stored job, by id, in a statement of its own. */
async function jobRunnableNow(
  db: Kysely<Database>,
  jobId: string,
  offlineSeconds: number,
): Promise<boolean> {
  const { rows } = await sql<{
    runnable: boolean;
  }>`select ${runnableNow("j", offlineSeconds)} as runnable from jobs j where j.id = ${jobId}`.execute(
    db,
  );
  return rows[0]?.runnable === true;
}

/**
 * Why the queued job `job` is not running, or undefined when a registered,
 * unpaused, connected runner can take it now (it is about to be claimed).
 * The claim's clauses (src/store/sql/functions) are asked one by one of the
 * stored job and each registered runner of its workspace, and the first that
 * fails is reported, in the order an operator fixes them: the workspace is
 * paused (forelead_workspace_unpaused); the job is not due yet
 * (forelead_job_due: scheduled, or in its retry backoff); no runner is
 * registered there; none has the labels (forelead_labels_match); none of
 * those meets the job's requirements (forelead_meets_requirements, then one
 * requirement at a time to name it); every matching one is paused
 * (forelead_runner_unpaused); none of them is connected (its state:
 * offline, not heard from within `offlineSeconds`, or draining); the job's concurrency group is full
 * (forelead_group_has_room); its rate limit is used up (forelead_rate_limit_room, and when it has
 * room again, forelead_rate_limit_next); every one is busy (forelead_slot_free). First,
 * whether the job is runnable now at all (runnableNow): `runnable` when the
 * caller's own statement asked it, else a statement of its own.
 */
async function jobWaiting(
  db: Kysely<Database>,
  job: JobSnapshot,
  offlineSeconds: number,
  runnable?: boolean,
): Promise<JobWaiting | undefined> {
  if (job.state !== "queued") return undefined;
  const jobId = String(job.id);
  const workspaceId = String(job.workspaceId);
  const labels = (job.labels as string[] | undefined) ?? [];
  const req = (job.requirements as Requirements | undefined) ?? {};
  const claimableAt = typeof job.claimableAt === "string" ? new Date(job.claimableAt) : undefined;
  // The common case, a job a runner can take now: answered by the caller's statement (`runnable`),
  // or by one that stops at the first such runner. A job not due by this process's clock skips the
  // latter (the clauses below then decide, by the database's clock).
  const dueHere = !claimableAt || claimableAt.getTime() <= Date.now();
  if (dueHere && (runnable ?? (await jobRunnableNow(db, jobId, offlineSeconds)))) return undefined;
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
    ? sql`array_remove(array[${sql.join(
        wanted.map(
          ([name, args]) => sql`case when
      forelead_meets_requirements(${args}, ${capabilities}) then null else ${name}::text end`,
        ),
      )}], null)`
    : sql`'{}'::text[]`;
  const [clauses, runners] = await Promise.all([
    sql<JobClauses>`
      select j.claimable_at, j.attempts, forelead_job_due(j.claimable_at) as due,
        w.unpaused as workspace_unpaused, p.paused_at, p.paused_by, p.reason,
        j.concurrency_key, j.concurrency_limit, g.n as group_running,
        forelead_group_has_room(j.concurrency_key, j.concurrency_limit, g.n) as group_room,
        j.rate_limit, coalesce(forelead_rate_limit_room(rl.starts, rl.max_starts,
          rl.window_seconds, now()), true) as rate_room,
        rl.max_starts as rate_max, rl.window_seconds as rate_window,
        forelead_rate_limit_next(rl.starts, rl.max_starts, rl.window_seconds, now()) as rate_next
      from jobs j
      cross join lateral forelead_workspace_unpaused(j.workspace_id) w
      cross join lateral (select forelead_group_running(j.workspace_id, j.concurrency_key) as n) g
      left join workspace_pauses p on p.workspace_id = j.workspace_id
      left join rate_limits rl on rl.name = j.rate_limit
      where j.id = ${jobId} and j.state = 'queued'`
      .execute(db)
      .then((r) => r.rows[0]),
    sql<RunnerClauses>`
      select r.runner_id, r.slots, live.n as live_leases,
        forelead_labels_match(j.labels, r.labels) as labels_match,
        array(select x from unnest(j.labels) x where not x = any(r.labels) order by x) as missing,
        forelead_meets_requirements(${requirements}, ${capabilities}) as meets, ${unmet} as unmet,
        forelead_runner_unpaused(r.paused_at) as unpaused,
        ${connectedRunner(offlineSeconds)} as connected,
        forelead_slot_free(live.n, r.slots) as slot_free
      from jobs j
      join runners r on r.workspace_id = j.workspace_id
      cross join lateral forelead_live_leases(r.workspace_id, r.runner_id) live
      where j.id = ${jobId} and r.retired_at is null
      order by r.runner_id`
      .execute(db)
      .then((r) => r.rows),
  ]);
  // Claimed, settled or gone since the snapshot was read: it waits no longer.
  if (!clauses) return undefined;
  const ws = JSON.stringify(workspaceId);
  if (!clauses.workspace_unpaused) {
    const why = clauses.reason ? ` (${clauses.reason})` : "";
    return {
      code: "workspace_paused",
      message:
        `workspace ${ws} is paused since ` +
        `${new Date(clauses.paused_at!).toISOString()} by ` +
        `${clauses.paused_by}${why}: its queued jobs are not claimed; resume it ` +
        `(POST /v1/admin/workspaces/${workspaceId}/resume) to let runners take ` +
        `them`,
    };
  }
  if (!clauses.due) {
    const until = new Date(clauses.claimable_at).toISOString();
    return Number(clauses.attempts) > 0
      ? {
          code: "backoff",
          until,
          message:
            `the job failed attempt ${Number(clauses.attempts)} and waits out its ` +
            `retry backoff: it is claimable again at ${until}`,
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
      message:
        `no runner is registered in workspace ${ws}: enroll one there (forelead ` +
        `runner enroll with a grant for ${ws}), or check the job's workspaceId ` +
        `for a typo`,
    };
  }
  const matching = runners.filter((r) => r.labels_match);
  if (matching.length === 0) {
    const closest = runners.reduce((best, r) =>
      r.missing.length < best.missing.length ? r : best,
    );
    const missing = closest.missing.join(",");
    return {
      code: "missing_labels",
      message:
        `no runner in workspace ${ws} has labels ${labels.join(",")}; the ` +
        `closest, ${JSON.stringify(closest.runner_id)}, lacks ${missing}: ` +
        `register one with --labels including ${missing}, or drop the label from ` +
        `the job`,
      missingLabels: closest.missing,
    };
  }
  const meeting = matching.filter((r) => r.meets);
  if (meeting.length === 0) {
    // The first requirement no labelled runner meets; else (each is met by some runner, none meets
    // all) the closest runner's first.
    const unmetByAll = wanted
      .map(([name]) => name)
      .find((name) => matching.every((r) => r.unmet.includes(name)));
    const closest = matching.reduce((best, r) => (r.unmet.length < best.unmet.length ? r : best));
    const unmetRequirement = unmetByAll ?? closest.unmet[0]!;
    const message = unmetByAll
      ? `no runner with ${unmetByAll} in workspace ` +
        `${ws}${labels.length ? ` among those with labels ${labels.join(",")}` : ""}: ` +
        `register one that has it, or drop it from the job's requirements`
      : `no runner in workspace ${ws} meets all of the job's requirements; the ` +
        `closest, ${JSON.stringify(closest.runner_id)}, lacks ` +
        `${closest.unmet.join(", ")}`;
    return { code: "unmet_requirements", message, unmetRequirement };
  }
  const unpaused = meeting.filter((r) => r.unpaused);
  if (unpaused.length === 0) {
    return {
      code: "runners_paused",
      message:
        `every runner in workspace ${ws} with the job's labels is paused ` +
        `(${matching.map((r) => r.runner_id).join(", ")}); resume one (POST ` +
        `/v1/admin/runners/{runnerId}/resume)`,
    };
  }
  const connected = unpaused.filter((r) => r.connected);
  if (connected.length === 0) {
    return {
      code: "runners_not_connected",
      message:
        `runners in workspace ${ws} have the job's labels ` +
        `(${unpaused.map((r) => r.runner_id).join(", ")}) but none is connected: each is ` +
        `offline (not heard from in the last ${offlineSeconds} s) or draining: start one, ` +
        `or check its network and certificate (its log says why it cannot reach the ` +
        `control plane)`,
    };
  }
  if (!clauses.group_room) {
    const groupKey = clauses.concurrency_key!;
    const running = Number(clauses.group_running);
    return {
      code: "concurrency_group",
      message:
        `concurrency group ${JSON.stringify(groupKey)} is full: ${running} of at ` +
        `most ${clauses.concurrency_limit} running in workspace ${ws}; the job ` +
        `runs when one of them ends (the group's queued jobs go oldest first)`,
      concurrencyKey: groupKey,
      concurrencyRunning: running,
    };
  }
  if (!clauses.rate_room) {
    const limit = clauses.rate_limit!;
    const until = new Date(clauses.rate_next!).toISOString();
    const per = clauses.rate_window === 1 ? "second" : "minute";
    return {
      code: "rate_limited",
      rateLimit: limit,
      until,
      message:
        `rate limit ${JSON.stringify(limit)} is used up: at most ${clauses.rate_max} of its ` +
        `jobs start per ${per}, across all replicas; the job may start from ${until} ` +
        `(raise it with PUT /v1/admin/rate-limits/${limit})`,
    };
  }
  if (connected.every((r) => !r.slot_free)) {
    const busySlots = connected.reduce((n, r) => n + r.slots, 0);
    return {
      code: "all_busy",
      message:
        `all ${connected.length} matching ` +
        `runner${connected.length === 1 ? "" : "s"} in workspace ${ws} are busy ` +
        `(${busySlots} slot${busySlots === 1 ? "" : "s"} in use); the job runs ` +
        `when one frees a slot, or add a runner or slots`,
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
  offlineSeconds: number,
  runnable?: boolean,
): Promise<JobSnapshot> {
  const waiting = await jobWaiting(db, job, offlineSeconds, runnable);
  return waiting ? { ...job, waiting } : job;
}
