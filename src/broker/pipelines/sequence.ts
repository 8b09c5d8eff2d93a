import type { Kysely, Transaction } from "kysely";
import type { Database, JobState, StepState } from "../../store/schema.js";
import { recordEvent, type EventType } from "../../events/record.js";
import { pipelineStepSecretBinding } from "../../secrets/bindings.js";
import type { SecretBox } from "../../secrets/box.js";
import type { SettleHook } from "./settle-hook.js";
import { enqueueJob } from "../jobs/enqueue.js";
import { type EnqueueInput, type JobTimeouts } from "../jobs/rules.js";
import type { CodeHooks } from "../leases/pinning.js";
import type { StepInputSpec } from "./graph.js";
import { missingInputs } from "./inputs.js";

// The one home of how a pipeline moves. advancePipeline is called in every
// transaction that changes one of its steps' jobs or the pipeline itself:
// the settle of a job (complete, expire, cancel, a failed pin, a release of
// a cancelled job: through the SettleHook the broker passes them), a submit,
// a cancel and a resume. It locks the pipeline row first, so the
// transitions of one pipeline are serial across replicas and commit with
// the change that caused them.

/** What enqueueing a step's job needs: the broker's enqueue context. */
export interface StepEnqueue {
  readonly timeouts: JobTimeouts;
  readonly code?: CodeHooks;
  readonly box?: SecretBox;
}

/** The SettleHook of a broker: advances the pipelines of the settled jobs that are steps. */
export function pipelineSettleHook(ctx: StepEnqueue): SettleHook {
  return async (tx, jobIds) => {
    const owners = await tx
      .selectFrom("pipeline_steps")
      .select("pipeline_id")
      .distinct()
      .where("job_id", "in", [...jobIds])
      .orderBy("pipeline_id")
      .execute();
    // In id order, so two transactions settling steps of the same pipelines lock them in one order.
    for (const { pipeline_id } of owners) await advancePipeline(tx, pipeline_id, ctx);
  };
}

type SettledState = "succeeded" | "failed" | "cancelled";
const settledJob = new Set<JobState>(["succeeded", "failed", "cancelled"]);
/**
 * Whether a step's job has settled for good (a job waiting for input has not: its step stays as it
 * is).
 */
const isSettled = (state: JobState | null): state is SettledState =>
  state !== null && settledJob.has(state);

/**
 * Jobs that settled while their step still waits on them: a settle path that
 * runs no SettleHook (a runner's retirement releasing a job whose cancel was
 * asked, an input request that expired). The broker's sweep passes them to
 * its hook, so no pipeline waits for a step that is already over; every path
 * with a hook moves its steps in the settling transaction and never shows up
 * here. Bounded; reads the partial index pipeline_steps_open.
 */
export async function strandedStepJobs(db: Kysely<Database>, limit = 100): Promise<string[]> {
  const rows = await db
    .selectFrom("pipeline_steps as s")
    .innerJoin("jobs as j", "j.id", "s.job_id")
    .select("j.id")
    .where("s.state", "in", ["queued", "running"])
    .where("j.state", "in", [...settledJob])
    .limit(limit)
    .execute();
  return rows.map((r) => r.id);
}

interface StepRow {
  name: string;
  needs: string[];
  allow_failure: boolean;
  state: StepState;
  job_id: string | null;
  job_state: JobState | null;
  request: Record<string, unknown>;
  inputs: unknown;
}

/**
 * Moves a pipeline as far as it goes now: a queued step whose job settled
 * takes its outcome; a pending step is skipped when a step it needs failed
 * (without allowFailure), was skipped or cancelled, is cancelled when the
 * pipeline is, and gets a job when every step it needs succeeded (or failed
 * with allowFailure); the pipeline settles once no step is pending or
 * queued. Each transition writes its event. Locks the pipeline row.
 */
export async function advancePipeline(
  tx: Transaction<Database>,
  pipelineId: string,
  ctx: StepEnqueue,
): Promise<void> {
  const pipeline = await tx
    .selectFrom("pipelines")
    .selectAll()
    .where("id", "=", pipelineId)
    .forUpdate()
    .executeTakeFirstOrThrow();
  const steps: StepRow[] = await tx
    .selectFrom("pipeline_steps as s")
    .leftJoin("jobs as j", "j.id", "s.job_id")
    .select([
      "s.name",
      "s.needs",
      "s.allow_failure",
      "s.state",
      "s.job_id",
      "j.state as job_state",
      "s.request",
      "s.inputs",
    ])
    .where("s.pipeline_id", "=", pipelineId)
    .orderBy("s.ord")
    .execute();
  const byName = new Map(steps.map((s) => [s.name, s]));
  const event = (type: EventType, s: StepRow, data: Record<string, unknown> = {}) =>
    recordEvent(tx, {
      type,
      workspaceId: pipeline.workspace_id,
      jobId: s.job_id,
      data: { pipelineId, step: s.name, ...data },
    });
  const move = async (s: StepRow, state: StepState, set: { job_id?: string } = {}) => {
    s.state = state;
    if (set.job_id) s.job_id = set.job_id;
    await tx
      .updateTable("pipeline_steps")
      .set((eb) => ({
        state,
        updated_at: new Date(),
        ...(set.job_id ? { job_id: set.job_id, attempts: eb("attempts", "+", 1) } : {}),
      }))
      .where("pipeline_id", "=", pipelineId)
      .where("name", "=", s.name)
      .execute();
    await event(`step.${state}` as EventType, s);
  };
  for (const s of steps) {
    if ((s.state === "queued" || s.state === "running") && isSettled(s.job_state))
      await move(s, s.job_state);
  }
  const blocks = (n: StepRow) =>
    n.state === "skipped" || n.state === "cancelled" || (n.state === "failed" && !n.allow_failure);
  const passes = (n: StepRow) =>
    n.state === "succeeded" || (n.state === "failed" && n.allow_failure);
  // Until nothing moves: a skip makes its dependents skippable in the same pass.
  for (let moved = true; moved;) {
    moved = false;
    for (const s of steps) {
      if (s.state !== "pending") continue;
      const needs = s.needs.map((n) => byName.get(n)!);
      if (pipeline.cancel_requested) await move(s, "cancelled");
      else if (needs.some(blocks)) await move(s, "skipped");
      else if (needs.every(passes)) {
        const jobId = await enqueueStep(tx, pipeline, s, ctx);
        const missing = await missingInputs(tx, pipelineId, s.inputs as StepInputSpec[]);
        if (missing.length) await failMissingInput(tx, pipeline.workspace_id, jobId, missing);
        await move(s, missing.length ? "failed" : "queued", { job_id: jobId });
      } else continue;
      moved = true;
    }
  }
  const open = steps.some(
    (s) => s.state === "pending" || s.state === "queued" || s.state === "running",
  );
  const started = steps.some((s) => s.state !== "pending" && s.state !== "queued");
  if (open) {
    if (started && pipeline.state === "queued")
      await tx
        .updateTable("pipelines")
        .set({ state: "running", updated_at: new Date() })
        .where("id", "=", pipelineId)
        .execute();
    return;
  }
  const state: JobState = pipeline.cancel_requested
    ? "cancelled"
    : steps.some(blocks)
      ? "failed"
      : "succeeded";
  await tx
    .updateTable("pipelines")
    .set({ state, settled_at: new Date(), updated_at: new Date() })
    .where("id", "=", pipelineId)
    .execute();
  // A succeeded pipeline is never resumed: its steps' secrets are no longer needed.
  if (state === "succeeded")
    await tx.deleteFrom("pipeline_step_secrets").where("pipeline_id", "=", pipelineId).execute();
  await recordEvent(tx, {
    type: "pipeline.settled",
    workspaceId: pipeline.workspace_id,
    data: { pipelineId, name: pipeline.name, state },
  });
}

/**
 * Fails a step's just-enqueued job, never leased, because inputs it declared match no artifact:
 * failure reason missing_input, the message naming each input and how to let the step run
 * without it.
 */
async function failMissingInput(
  tx: Transaction<Database>,
  workspaceId: string,
  jobId: string,
  missing: readonly StepInputSpec[],
): Promise<void> {
  const named = missing
    .map(
      (i) =>
        `${i.name ? `name ${JSON.stringify(i.name)}` : `glob ${JSON.stringify(i.glob)}`} from step ${i.step}`,
    )
    .join(", ");
  await tx
    .updateTable("jobs")
    .set({
      state: "failed",
      failure_reason: "missing_input",
      failure_message:
        `no artifact matches the input(s) ${named}; the step did not run (declare an ` +
        `input optional: true to run without it)`,
      settled_at: new Date(),
      updated_at: new Date(),
    })
    .where("id", "=", jobId)
    .execute();
  await recordEvent(tx, {
    type: "job.settled",
    workspaceId,
    jobId,
    data: { outcome: "failed", errorCode: "missing_input", attempt: 0 },
  });
}

/**
 * Enqueues a step's job through the broker's one enqueue path, in `tx`; its secrets opened from the
 * step's rows.
 */
async function enqueueStep(
  tx: Transaction<Database>,
  pipeline: { id: string; workspace_id: string; enqueued_by: string | null },
  step: StepRow,
  ctx: StepEnqueue,
): Promise<string> {
  const rows = await tx
    .selectFrom("pipeline_step_secrets")
    .selectAll()
    .where("pipeline_id", "=", pipeline.id)
    .where("step", "=", step.name)
    .execute();
  const secrets: Record<string, string> = {};
  const secretFiles: Record<string, string> = {};
  for (const r of rows)
    (r.kind === "env" ? secrets : secretFiles)[r.name] = ctx.box!.open(
      r.sealed,
      pipelineStepSecretBinding(pipeline.id, step.name, r.kind, r.name),
    );
  const request = step.request as unknown as StoredStepRequest;
  // The repository and branch were checked at submit; the code host is not asked again under the
  // pipeline's lock.
  const code: CodeHooks | undefined = ctx.code && {
    ...ctx.code,
    checkTarget: async () => undefined,
  };
  const job = await enqueueJob(
    tx,
    {
      ...enqueueFieldsOf(request),
      workspaceId: pipeline.workspace_id,
      idempotencyKey: "",
      enqueuedBy: pipeline.enqueued_by ?? undefined,
      secrets,
      secretFiles,
    },
    ctx.timeouts,
    code,
    ctx.box,
  );
  return String(job.id);
}

/**
 * A step's job fields as stored at submit (secrets apart), as JSON: runAt as
 * its RFC 3339 text. delaySeconds is counted by the enqueue, so from when the
 * step becomes ready; runAt is a time, so a step ready after it is claimable
 * at once.
 */
export type StoredStepRequest = Pick<
  EnqueueInput,
  | "labels"
  | "repository"
  | "targetBranch"
  | "spec"
  | "maxAttempts"
  | "priority"
  | "kind"
  | "delaySeconds"
  | "concurrencyKey"
  | "concurrencyLimit"
  | "fairnessKey"
  | "rateLimit"
  | "backoff"
  | "requirements"
  | "idToken"
  | "displayName"
> & { readonly runAt?: string };

/** A stored step request as the enqueue takes it. */
export function enqueueFieldsOf({
  runAt,
  ...request
}: StoredStepRequest): Omit<EnqueueInput, "workspaceId" | "idempotencyKey"> {
  return { ...request, runAt: runAt ? new Date(runAt) : undefined };
}
