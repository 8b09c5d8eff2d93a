import { Code, ConnectError } from "@connectrpc/connect";
import { sql, type Kysely, type Selectable } from "kysely";
import type {
  Database,
  MissedRunsPolicy,
  OverlapPolicy,
  ScheduleFiresTable,
  SchedulesTable,
} from "../../store/schema.js";
import { checkSegmentId } from "../../identity/segment-id.js";
import { definedOnly } from "../../protocol/defined-only.js";
import { scheduleSecretBinding } from "../../secrets/bindings.js";
import { inTransaction } from "../../store/transaction.js";
import { checkRowId, newJobId } from "../ids.js";
import { bad, validateEnqueue, type EnqueueInput } from "../jobs/rules.js";
import { hasSecrets, type JobSecretsInput } from "../jobs/secrets.js";
import {
  checkSubmission,
  storedRequest,
  type PipelineSubmission,
  type StepSubmission,
} from "../pipelines/pipelines.js";
import type { StepEnqueue } from "../pipelines/sequence.js";
import type { SettleHook } from "../pipelines/settle-hook.js";
import { parseCron } from "./cron.js";
import { fireSchedule, tickSchedules, type FireContext } from "./fire.js";

/** A schedule as created, decoded: one of `job` or `pipeline` is its template. */
interface ScheduleInput {
  readonly workspaceId: string;
  readonly name: string;
  readonly cron: string;
  /** IANA; empty: UTC. */
  readonly timeZone: string;
  /** A job template: an enqueue without workspaceId, idempotencyKey and runAt (refused). */
  readonly job?: EnqueueInput;
  /** A pipeline template: without workspaceId, idempotencyKey and a step's runAt (refused). */
  readonly pipeline?: PipelineSubmission;
  /** Empty: skip. */
  readonly missedRuns: string;
  /** Empty: allow. */
  readonly overlap: string;
  /** The SPIFFE ID creating it: the owner of every job it fires. */
  readonly createdBy: string;
}

/** A schedule's view, in the JSON names of forelead.admin.v1.Schedule. */
export type ScheduleView = Record<string, unknown>;

/** A fire's view, in the JSON names of forelead.admin.v1.ScheduleFire. */
type FireView = Record<string, unknown>;

/** Schedules: create, read, pause, resume, delete, run now, and the ticker's one tick. */
export interface Schedules {
  create(input: ScheduleInput): Promise<ScheduleView>;
  get(scheduleId: string): Promise<ScheduleView>;
  list(workspaceId: string): Promise<ScheduleView[]>;
  pause(scheduleId: string, by: string): Promise<ScheduleView>;
  resume(scheduleId: string): Promise<ScheduleView>;
  delete(scheduleId: string): Promise<ScheduleView>;
  /** Fires the schedule now (cause "manual"), under its overlap policy. */
  runNow(scheduleId: string, by: string): Promise<FireView>;
  /** Fires every due schedule once per due time; returns how many fires it recorded. */
  tick(): Promise<number>;
}

const missedRunsPolicies: readonly MissedRunsPolicy[] = ["skip", "runOnce", "all"];
const overlapPolicies: readonly OverlapPolicy[] = ["allow", "skip", "cancelPrevious"];

/** Bounds of a schedule; past them a create is refused by name. */
const scheduleNameLimit = 200;
/** The fires GetSchedule shows. */
const recentFires = 20;

/** The schedules of a broker: fires enqueue through `ctx` (the step enqueue's own path). */
export function createSchedules(
  db: Kysely<Database>,
  ctx: StepEnqueue,
  settled: SettleHook,
): Schedules {
  const fire: FireContext = { ...ctx, settled };
  const id = (scheduleId: string) => checkRowId("scheduleId", "schedule", scheduleId);
  return {
    create: (input) => createSchedule(db, input, ctx),
    get: (scheduleId) => getSchedule(db, id(scheduleId), recentFires),
    list: (workspaceId) => listSchedules(db, workspaceId),
    pause: (scheduleId, by) => pauseSchedule(db, id(scheduleId), by),
    resume: (scheduleId) => resumeSchedule(db, id(scheduleId)),
    delete: (scheduleId) => deleteSchedule(db, id(scheduleId)),
    runNow: (scheduleId, by) => runNow(db, id(scheduleId), by, fire),
    tick: () => tickSchedules(db, fire),
  };
}

/** Prefixes a refusal of a template's own rules with the template's field. */
function within<T>(field: string, fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    if (err instanceof ConnectError)
      throw new ConnectError(`${field}: ${err.rawMessage}`, err.code);
    throw err;
  }
}

/** A field the schedule sets itself, refused in a template. */
function refuseOwn(field: string, given: unknown, why: string): void {
  if (given) bad(`${field} is set by the schedule (${why}); leave it out of the template`);
}

/**
 * Checks a schedule (name, workspace, cron, time zone, policies, template by the enqueue's and the
 * pipeline's own rules) and builds its row; throws naming the first thing wrong.
 */
async function prepareSchedule(input: ScheduleInput, ctx: StepEnqueue) {
  checkSegmentId("workspaceId", input.workspaceId);
  if (!input.name) bad("name is required: what views, events and the CLI call the schedule");
  if (input.name.length > scheduleNameLimit)
    bad(`name is longer than ${scheduleNameLimit} characters`);
  if (!input.cron) bad('cron is required, e.g. "0 3 * * *" (03:00 every day)');
  const timeZone = input.timeZone || "UTC";
  const cron = parseCron(input.cron, timeZone);
  const missedRuns = (input.missedRuns || "skip") as MissedRunsPolicy;
  if (!missedRunsPolicies.includes(missedRuns))
    bad(
      `missedRuns ${JSON.stringify(input.missedRuns.slice(0, 40))} is not one of ` +
        `${missedRunsPolicies.join(", ")}`,
    );
  const overlap = (input.overlap || "allow") as OverlapPolicy;
  if (!overlapPolicies.includes(overlap))
    bad(
      `overlap ${JSON.stringify(input.overlap.slice(0, 40))} is not one of ` +
        `${overlapPolicies.join(", ")}`,
    );
  const { job, pipeline } = input;
  if (!job === !pipeline) bad("give one of job or pipeline: what each fire starts");
  const reason = "each fire's own";
  const secrets: Array<{ step: string } & JobSecretsInput> = [];
  let template: Record<string, unknown>;
  const repositories: Array<{ field: string; repository: string; targetBranch: string }> = [];
  if (job) {
    refuseOwn("job.workspaceId", job.workspaceId, "its workspaceId");
    refuseOwn("job.idempotencyKey", job.idempotencyKey, `${reason}, from its id and due time`);
    refuseOwn("job.runAt", job.runAt, "each due time; use job.delaySeconds to delay from it");
    const checked = { ...job, workspaceId: input.workspaceId, idempotencyKey: "" };
    within("job", () => validateEnqueue(checked, ctx.timeouts));
    if (hasSecrets(job) && !ctx.box)
      bad("this control plane has no secrets key, so it cannot store a schedule's secrets");
    template = { ...storedRequest(job) };
    secrets.push({ step: "", secrets: job.secrets, secretFiles: job.secretFiles });
    if (job.repository)
      repositories.push({
        field: "job",
        repository: job.repository,
        targetBranch: job.targetBranch,
      });
  } else {
    const p = pipeline!;
    refuseOwn("pipeline.workspaceId", p.workspaceId, "its workspaceId");
    refuseOwn("pipeline.idempotencyKey", p.idempotencyKey, `${reason}, from its id and due time`);
    p.steps.forEach((s, i) =>
      refuseOwn(`pipeline.steps[${i}].runAt`, s.runAt, "each due time; use delaySeconds"),
    );
    within("pipeline", () =>
      checkSubmission({ ...p, workspaceId: input.workspaceId, idempotencyKey: "" }, ctx),
    );
    template = {
      name: p.name,
      steps: p.steps.map((s: StepSubmission) => ({
        name: s.name,
        needs: [...s.needs],
        inputs: s.inputs.map((i) => ({ step: i.step, name: i.name, glob: i.glob })),
        allowFailure: s.allowFailure,
        request: storedRequest(s),
      })),
    };
    for (const s of p.steps) {
      secrets.push({ step: s.name, secrets: s.secrets, secretFiles: s.secretFiles });
      if (s.repository)
        repositories.push({
          field: `pipeline.steps (${s.name})`,
          repository: s.repository,
          targetBranch: s.targetBranch,
        });
    }
  }
  for (const r of repositories) {
    if (!ctx.code)
      bad(
        `${r.field}: repository ${JSON.stringify(r.repository)} is not registered: ` +
          `this control plane serves no code routes`,
      );
    await within(r.field, () => ctx.code!.checkTarget(r.repository, r.targetBranch));
  }
  return { cron, timeZone, missedRuns, overlap, template, secrets };
}

async function createSchedule(
  db: Kysely<Database>,
  input: ScheduleInput,
  ctx: StepEnqueue,
): Promise<ScheduleView> {
  const prepared = await prepareSchedule(input, ctx);
  const id = newJobId();
  try {
    await inTransaction(db, async (tx) => {
      const now = await databaseNow(tx);
      await tx
        .insertInto("schedules")
        .values({
          id,
          workspace_id: input.workspaceId,
          name: input.name,
          cron: input.cron.trim(),
          time_zone: prepared.timeZone,
          template_kind: input.job ? "job" : "pipeline",
          template: JSON.stringify(prepared.template),
          missed_runs: prepared.missedRuns,
          overlap: prepared.overlap,
          next_run_at: prepared.cron.next(now)!,
          created_by: input.createdBy,
        })
        .execute();
      const rows = prepared.secrets.flatMap(({ step, secrets, secretFiles }) => [
        ...Object.entries(secrets ?? {}).map(
          ([name, value]) => ({ step, kind: "env", name, value }) as const,
        ),
        ...Object.entries(secretFiles ?? {}).map(
          ([name, value]) => ({ step, kind: "file", name, value }) as const,
        ),
      ]);
      if (rows.length)
        await tx
          .insertInto("schedule_secrets")
          .values(
            rows.map((r) => ({
              schedule_id: id,
              step: r.step,
              kind: r.kind,
              name: r.name,
              sealed: ctx.box!.seal(r.value, scheduleSecretBinding(id, r.step, r.kind, r.name)),
            })),
          )
          .execute();
    });
  } catch (err) {
    if ((err as { code?: string }).code === "23505")
      throw new ConnectError(
        `a schedule named ${JSON.stringify(input.name)} already exists in workspace ` +
          `"${input.workspaceId}"; delete it or choose another name`,
        Code.AlreadyExists,
      );
    throw err;
  }
  return getSchedule(db, id, recentFires);
}

/** The database's clock (a transaction's start time inside one). */
async function databaseNow(q: Kysely<Database>): Promise<Date> {
  const { rows } = await sql<{ now: Date }>`select now() as now`.execute(q);
  return new Date(rows[0]!.now);
}

type ScheduleRow = Selectable<SchedulesTable>;
type FireRow = Selectable<ScheduleFiresTable>;

/** A schedule row, locked for the caller's transaction; not found is 404. */
async function lockSchedule(q: Kysely<Database>, id: string): Promise<ScheduleRow> {
  const row = await q
    .selectFrom("schedules")
    .selectAll()
    .where("id", "=", id)
    .forUpdate()
    .executeTakeFirst();
  if (!row) throw notFound(id);
  return row;
}

function notFound(id: string): ConnectError {
  return new ConnectError(`schedule ${id} not found`, Code.NotFound);
}

async function getSchedule(db: Kysely<Database>, id: string, fires: number): Promise<ScheduleView> {
  const row = await db.selectFrom("schedules").selectAll().where("id", "=", id).executeTakeFirst();
  if (!row) throw notFound(id);
  return (await views(db, [row], fires))[0]!;
}

async function listSchedules(db: Kysely<Database>, workspaceId: string): Promise<ScheduleView[]> {
  if (workspaceId) checkSegmentId("workspaceId", workspaceId);
  const rows = await db
    .selectFrom("schedules")
    .selectAll()
    .$if(workspaceId !== "", (qb) => qb.where("workspace_id", "=", workspaceId))
    .orderBy("workspace_id")
    .orderBy("name")
    .limit(1000)
    .execute();
  return views(db, rows, 0);
}

async function pauseSchedule(db: Kysely<Database>, id: string, by: string): Promise<ScheduleView> {
  await inTransaction(db, async (tx) => {
    const row = await lockSchedule(tx, id);
    if (row.paused_at) return;
    await tx
      .updateTable("schedules")
      .set({ paused_at: sql<Date>`now()`, paused_by: by, updated_at: sql<Date>`now()` })
      .where("id", "=", id)
      .execute();
  });
  return getSchedule(db, id, recentFires);
}

/** Resumes from the cron's next due time after now: the due times passed while paused are not fired. */
async function resumeSchedule(db: Kysely<Database>, id: string): Promise<ScheduleView> {
  await inTransaction(db, async (tx) => {
    const row = await lockSchedule(tx, id);
    if (!row.paused_at) return;
    const next = parseCron(row.cron, row.time_zone).next(await databaseNow(tx));
    await tx
      .updateTable("schedules")
      .set({ paused_at: null, paused_by: null, next_run_at: next!, updated_at: sql<Date>`now()` })
      .where("id", "=", id)
      .execute();
  });
  return getSchedule(db, id, recentFires);
}

async function deleteSchedule(db: Kysely<Database>, id: string): Promise<ScheduleView> {
  const view = await getSchedule(db, id, 0);
  await db.deleteFrom("schedules").where("id", "=", id).execute();
  return view;
}

async function runNow(
  db: Kysely<Database>,
  id: string,
  by: string,
  ctx: FireContext,
): Promise<FireView> {
  const fire = await inTransaction(db, async (tx) => {
    const row = await lockSchedule(tx, id);
    return fireSchedule(tx, row, await databaseNow(tx), "manual", ctx, by);
  });
  if (!fire)
    throw new ConnectError(
      `schedule ${id} was already fired at this instant; run it again`,
      Code.Aborted,
    );
  return fireView(fire);
}

/** The views of schedule rows: secret names (never values) and up to `fires` recent fires each. */
async function views(
  db: Kysely<Database>,
  rows: readonly ScheduleRow[],
  fires: number,
): Promise<ScheduleView[]> {
  if (!rows.length) return [];
  const ids = rows.map((r) => r.id);
  const secrets = await db
    .selectFrom("schedule_secrets")
    .select(["schedule_id", "step", "kind", "name"])
    .where("schedule_id", "in", ids)
    .orderBy("step")
    .orderBy("kind")
    .orderBy("name")
    .execute();
  const recent: FireRow[] =
    fires > 0
      ? await db
          .selectFrom("schedule_fires")
          .selectAll()
          .where("schedule_id", "in", ids)
          .orderBy("due_at", "desc")
          .limit(fires)
          .execute()
      : [];
  return rows.map((r) => {
    const template = r.template as Record<string, unknown>;
    return definedOnly({
      id: r.id,
      name: r.name,
      workspaceId: r.workspace_id,
      cron: r.cron,
      timeZone: r.time_zone,
      job: r.template_kind === "job" ? template : undefined,
      pipeline:
        r.template_kind === "pipeline"
          ? {
              name: template["name"],
              steps: (template["steps"] as Array<Record<string, unknown>>).map(
                ({ request, ...step }) => ({ ...step, ...(request as object) }),
              ),
            }
          : undefined,
      missedRuns: r.missed_runs,
      overlap: r.overlap,
      nextRunAt: new Date(r.next_run_at).toISOString(),
      paused: r.paused_at !== null,
      pausedAt: r.paused_at?.toISOString(),
      pausedBy: r.paused_by ?? undefined,
      createdBy: r.created_by ?? undefined,
      createdAt: r.created_at.toISOString(),
      updatedAt: r.updated_at.toISOString(),
      secretNames: secrets
        .filter((s) => s.schedule_id === r.id)
        .map((s) => `${s.step ? `${s.step}/` : ""}${s.kind === "file" ? "file:" : ""}${s.name}`),
      recentFires: recent.filter((f) => f.schedule_id === r.id).map(fireView),
    });
  });
}

/** A fire row as a view. */
function fireView(f: FireRow): FireView {
  return definedOnly({
    dueAt: new Date(f.due_at).toISOString(),
    firedAt: f.fired_at.toISOString(),
    cause: f.cause,
    outcome: f.outcome,
    jobId: f.job_id ?? undefined,
    pipelineId: f.pipeline_id ?? undefined,
    cancelledId: f.cancelled_id ?? undefined,
    idempotencyKey: f.idempotency_key ?? undefined,
    error: f.error ?? undefined,
  });
}
