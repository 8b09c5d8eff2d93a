// Firing: a schedule's due times become enqueues, exactly once each, by whichever replica gets
// there first. The ticker locks one due schedule at a time with FOR UPDATE SKIP LOCKED, so two
// replicas never work on one schedule at once, and advances its next_run_at in the transaction of
// its fires; each fire is also a schedule_fires row keyed by (schedule, due time), written in the
// transaction of its enqueue, and the enqueue's idempotency key is derived from the same pair:
// a due time that somehow came round again inserts nothing and enqueues nothing.
import { Code, ConnectError } from "@connectrpc/connect";
import { sql, type Kysely, type Selectable, type Transaction } from "kysely";
import type { Database, ScheduleFiresTable, SchedulesTable } from "../../store/schema.js";
import { recordEvent } from "../../events/record.js";
import { scheduleSecretBinding } from "../../secrets/bindings.js";
import { inTransaction } from "../../store/transaction.js";
import { cancelJob } from "../jobs/cancel.js";
import { enqueueJob } from "../jobs/enqueue.js";
import type { JobSecretsInput } from "../jobs/secrets.js";
import type { CodeHooks } from "../leases/pinning.js";
import { cancelPipeline, submitPipeline } from "../pipelines/pipelines.js";
import {
  enqueueFieldsOf,
  type StepEnqueue,
  type StoredStepRequest,
} from "../pipelines/sequence.js";
import type { SettleHook } from "../pipelines/settle-hook.js";
import type { StepInputSpec } from "../pipelines/graph.js";
import { parseCron } from "./cron.js";

/** What a fire enqueues with: the step enqueue's context and the broker's settle hook. */
export interface FireContext extends StepEnqueue {
  readonly settled: SettleHook;
}

/** Bounds of firing. */
const fireLimits = {
  /** Missed due times a tick looks at per schedule (the newest); `all` fires at most these. */
  maxMissed: 100,
  /**
   * A due time more than this many seconds behind the database clock when a tick reaches it was
   * missed (no control plane ran, or none could reach the database); a later one is on time.
   */
  lateSeconds: 10,
  /** Schedules one tick fires at most (each in its own transaction); the rest wait a tick. */
  schedulesPerTick: 500,
} as const;

type ScheduleRow = Selectable<SchedulesTable>;
type FireRow = Selectable<ScheduleFiresTable>;
type Cause = FireRow["cause"];

/** The idempotency key of a fire's job or pipeline: the schedule and the due time. */
function fireIdempotencyKey(scheduleId: string, dueAt: Date): string {
  return `schedule:${scheduleId}:${dueAt.toISOString()}`;
}

/**
 * Fires every due, unpaused schedule: one transaction per schedule, locked with SKIP LOCKED so
 * another replica's tick takes the next one. A schedule's due times from its next_run_at to now
 * are split into missed (more than lateSeconds behind) and on time; the missed ones follow its
 * missedRuns policy (skip: none fires; runOnce: the newest fires; all: each fires, up to maxMissed),
 * every one recorded; the on-time ones fire. Then next_run_at is the cron's next after now.
 * Returns the fires recorded.
 */
export async function tickSchedules(db: Kysely<Database>, ctx: FireContext): Promise<number> {
  let recorded = 0;
  for (let i = 0; i < fireLimits.schedulesPerTick; i++) {
    const fired = await inTransaction(db, async (tx) => {
      const row = await tx
        .selectFrom("schedules")
        .selectAll()
        .where("paused_at", "is", null)
        .where("next_run_at", "<=", sql<Date>`now()`)
        .orderBy("next_run_at")
        .limit(1)
        .forUpdate()
        .skipLocked()
        .executeTakeFirst();
      if (!row) return undefined;
      return fireDue(tx, row, ctx);
    });
    if (fired === undefined) break;
    recorded += fired;
  }
  return recorded;
}

/** The due times of one locked schedule, fired and recorded; next_run_at advanced. */
async function fireDue(
  tx: Transaction<Database>,
  row: ScheduleRow,
  ctx: FireContext,
): Promise<number> {
  const { rows } = await sql<{ now: Date }>`select now() as now`.execute(tx);
  const now = new Date(rows[0]!.now);
  const cron = parseCron(row.cron, row.time_zone);
  const from = new Date(row.next_run_at);
  const lateBefore = new Date(now.getTime() - fireLimits.lateSeconds * 1000);
  // previous() ends strictly before its reference, at whole seconds: one second on, then cut.
  const missed =
    from <= lateBefore
      ? cron
          .previous(fireLimits.maxMissed, new Date(lateBefore.getTime() + 1000))
          .filter((t) => t >= from && t <= lateBefore)
          .reverse()
      : [];
  const onTime: Date[] = [];
  for (
    let t = cron.next(new Date(Math.max(from.getTime(), lateBefore.getTime() + 1) - 1));
    t && t <= now;
    t = cron.next(t)
  )
    if (t > lateBefore) onTime.push(t);
  const fire = (due: Date, cause: Cause) => fireSchedule(tx, row, due, cause, ctx);
  let recorded = 0;
  const skipped: Date[] = [];
  for (const [i, due] of missed.entries()) {
    const runs =
      row.missed_runs === "all" || (row.missed_runs === "runOnce" && i === missed.length - 1);
    if (runs) recorded += (await fire(due, "missed")) ? 1 : 0;
    else if (await recordSkippedMissed(tx, row.id, due)) skipped.push(due);
  }
  if (skipped.length) {
    recorded += skipped.length;
    await recordEvent(tx, {
      type: "schedule.missed",
      workspaceId: row.workspace_id,
      data: {
        scheduleId: row.id,
        name: row.name,
        missedRuns: row.missed_runs,
        skipped: skipped.length,
        firstDueAt: skipped[0]!.toISOString(),
        lastDueAt: skipped.at(-1)!.toISOString(),
      },
    });
  }
  for (const due of onTime) recorded += (await fire(due, "due")) ? 1 : 0;
  const next = cron.next(now);
  await tx
    .updateTable("schedules")
    .set({
      // A cron with no due time left (a year field) is parked far ahead rather than lost.
      next_run_at: next ?? new Date("9999-12-31T00:00:00Z"),
      updated_at: sql<Date>`now()`,
    })
    .where("id", "=", row.id)
    .execute();
  return recorded;
}

/** A missed due time the policy does not fire, recorded; false when it was recorded before. */
async function recordSkippedMissed(
  tx: Transaction<Database>,
  scheduleId: string,
  due: Date,
): Promise<boolean> {
  const row = await tx
    .insertInto("schedule_fires")
    .values({
      schedule_id: scheduleId,
      due_at: due,
      cause: "missed",
      outcome: "skipped_missed",
      job_id: null,
      pipeline_id: null,
      cancelled_id: null,
      idempotency_key: null,
      error: null,
    })
    .onConflict((oc) => oc.columns(["schedule_id", "due_at"]).doNothing())
    .returning("due_at")
    .executeTakeFirst();
  return row !== undefined;
}

/** The run a fire started, read for the overlap policy. */
interface PreviousRun {
  readonly jobId: string | null;
  readonly pipelineId: string | null;
  readonly settled: boolean;
}

async function previousRun(
  tx: Transaction<Database>,
  scheduleId: string,
  due: Date,
): Promise<PreviousRun | undefined> {
  const prev = await tx
    .selectFrom("schedule_fires as f")
    .leftJoin("jobs as j", "j.id", "f.job_id")
    .leftJoin("pipelines as p", "p.id", "f.pipeline_id")
    .select(["f.job_id", "f.pipeline_id", "j.state as job_state", "p.settled_at"])
    .where("f.schedule_id", "=", scheduleId)
    .where("f.outcome", "=", "enqueued")
    .where("f.due_at", "<>", due)
    .orderBy("f.fired_at", "desc")
    .orderBy("f.due_at", "desc")
    .limit(1)
    .executeTakeFirst();
  if (!prev) return undefined;
  const settled = prev.job_id
    ? !["queued", "running", "waiting_input"].includes(prev.job_state ?? "succeeded")
    : prev.settled_at !== null;
  return { jobId: prev.job_id, pipelineId: prev.pipeline_id, settled };
}

/**
 * Fires one due time of a locked schedule in `tx`: the schedule_fires row (nothing when the due
 * time was fired before), the overlap policy against the previous run, then the enqueue through
 * the broker's one enqueue path (or the pipeline submit) with the fire's idempotency key, and a
 * `schedule.fired` event. An enqueue its rules refuse (a repository removed since, a secrets key
 * missing) is recorded as a failed fire, with the refusal, and the schedule goes on.
 */
export async function fireSchedule(
  tx: Transaction<Database>,
  row: ScheduleRow,
  due: Date,
  cause: Cause,
  ctx: FireContext,
  by?: string,
): Promise<FireRow | undefined> {
  const idempotencyKey = fireIdempotencyKey(row.id, due);
  const inserted = await tx
    .insertInto("schedule_fires")
    .values({
      schedule_id: row.id,
      due_at: due,
      cause,
      outcome: "enqueued",
      job_id: null,
      pipeline_id: null,
      cancelled_id: null,
      idempotency_key: idempotencyKey,
      error: null,
    })
    .onConflict((oc) => oc.columns(["schedule_id", "due_at"]).doNothing())
    .returning("due_at")
    .executeTakeFirst();
  if (!inserted) return undefined;
  const outcome: Partial<FireRow> = {};
  const prev = row.overlap === "allow" ? undefined : await previousRun(tx, row.id, due);
  const causedBy = `schedule ${row.id} ("${row.name}")${by ? ` run by ${by}` : ""}`;
  if (prev && !prev.settled && row.overlap === "skip") {
    outcome.outcome = "skipped_overlap";
    outcome.cancelled_id = null;
  } else {
    if (prev && !prev.settled && row.overlap === "cancelPrevious") {
      if (prev.jobId) await cancelJob(tx, prev.jobId, causedBy, ctx.settled);
      else await cancelPipeline(tx, prev.pipelineId!, causedBy, ctx, ctx.settled);
      outcome.cancelled_id = prev.jobId ?? prev.pipelineId;
    }
    await sql`savepoint schedule_fire`.execute(tx);
    try {
      const started = await start(tx, row, idempotencyKey, ctx);
      outcome.job_id = started.jobId ?? null;
      outcome.pipeline_id = started.pipelineId ?? null;
    } catch (err) {
      if (!(err instanceof ConnectError) || err.code === Code.Unavailable) throw err;
      await sql`rollback to savepoint schedule_fire`.execute(tx);
      outcome.outcome = "failed";
      outcome.error = err.rawMessage.slice(0, 1000);
    }
  }
  const fire = await tx
    .updateTable("schedule_fires")
    .set(outcome)
    .where("schedule_id", "=", row.id)
    .where("due_at", "=", due)
    .returningAll()
    .executeTakeFirstOrThrow();
  await recordEvent(tx, {
    type: "schedule.fired",
    workspaceId: row.workspace_id,
    jobId: fire.job_id,
    data: {
      scheduleId: row.id,
      name: row.name,
      dueAt: due.toISOString(),
      cause,
      outcome: fire.outcome,
      pipelineId: fire.pipeline_id ?? undefined,
      cancelledId: fire.cancelled_id ?? undefined,
    },
  });
  return fire;
}

/** A schedule's pipeline template as stored. */
interface StoredPipelineTemplate {
  readonly name: string;
  readonly steps: ReadonlyArray<{
    readonly name: string;
    readonly needs: readonly string[];
    readonly inputs: readonly StepInputSpec[];
    readonly allowFailure: boolean;
    readonly request: StoredStepRequest;
  }>;
}

/** Enqueues the schedule's job (or submits its pipeline), its secrets opened from its rows. */
async function start(
  tx: Transaction<Database>,
  row: ScheduleRow,
  idempotencyKey: string,
  ctx: FireContext,
): Promise<{ jobId?: string; pipelineId?: string }> {
  const secretRows = await tx
    .selectFrom("schedule_secrets")
    .selectAll()
    .where("schedule_id", "=", row.id)
    .execute();
  const secretsOf = (step: string): JobSecretsInput => {
    const secrets: Record<string, string> = {};
    const secretFiles: Record<string, string> = {};
    for (const r of secretRows.filter((s) => s.step === step))
      (r.kind === "env" ? secrets : secretFiles)[r.name] = ctx.box!.open(
        r.sealed,
        scheduleSecretBinding(row.id, step, r.kind, r.name),
      );
    return { secrets, secretFiles };
  };
  // The repository and branch were checked at create; the code host is not asked again under the
  // schedule's lock (the claim pins the base and refuses a branch gone since).
  const code: CodeHooks | undefined = ctx.code && {
    ...ctx.code,
    checkTarget: async () => undefined,
  };
  const enqueuedBy = row.created_by ?? undefined;
  if (row.template_kind === "job") {
    const job = await enqueueJob(
      tx,
      {
        ...enqueueFieldsOf(row.template as unknown as StoredStepRequest),
        ...secretsOf(""),
        workspaceId: row.workspace_id,
        idempotencyKey,
        enqueuedBy,
      },
      ctx.timeouts,
      code,
      ctx.box,
    );
    return { jobId: String(job.id) };
  }
  const template = row.template as unknown as StoredPipelineTemplate;
  const pipeline = await submitPipeline(
    tx,
    {
      workspaceId: row.workspace_id,
      name: template.name,
      idempotencyKey,
      enqueuedBy,
      steps: template.steps.map((s) => ({
        ...enqueueFieldsOf(s.request),
        ...secretsOf(s.name),
        name: s.name,
        needs: s.needs,
        inputs: s.inputs,
        allowFailure: s.allowFailure,
      })),
    },
    { ...ctx, code },
  );
  return { pipelineId: String(pipeline["id"]) };
}
