import { createHash } from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import type { Kysely, Selectable, Transaction } from "kysely";
import type { Database, JobState, PipelinesTable } from "../../store/schema.js";
import { checkSegmentId } from "../../identity/segment-id.js";
import { recordEvent } from "../../events/record.js";
import { pipelineStepSecretBinding } from "../../secrets/bindings.js";
import { definedOnly } from "../../protocol/defined-only.js";
import { checkRowId, newJobId } from "../ids.js";
import { inTransaction } from "../../store/transaction.js";
import { bad, jobKindOf, jobStates, validateEnqueue, type EnqueueInput } from "../jobs/rules.js";
import { cancelJob } from "../jobs/cancel.js";
import { hasSecrets, secretsDigest, type JobSecretsInput } from "../jobs/secrets.js";
import { afterPageToken, pageKey, pageTokenOf } from "../jobs/list.js";
import type { SettleHook } from "./settle-hook.js";
import { checkGraph, downstream, type StepInputSpec } from "./graph.js";
import { advancePipeline, type StepEnqueue, type StoredStepRequest } from "./sequence.js";

/** One step as submitted: its graph part, its job's fields and its secrets (write-only). */
export interface StepSubmission
  extends Omit<StoredStepRequest, "runAt">, Pick<EnqueueInput, "runAt">, JobSecretsInput {
  readonly name: string;
  readonly needs: readonly string[];
  readonly inputs: readonly StepInputSpec[];
  readonly allowFailure: boolean;
}

/** A pipeline as submitted, decoded. */
export interface PipelineSubmission {
  readonly workspaceId: string;
  readonly name: string;
  readonly idempotencyKey: string;
  readonly steps: readonly StepSubmission[];
  /** The SPIFFE ID submitting it: the owner of the pipeline and of its steps' jobs. */
  readonly enqueuedBy?: string;
}

/** A pipeline's view, in the JSON names of forelead.admin.v1.Pipeline. */
export type PipelineView = Record<string, unknown>;

/** Filter and page of a pipeline listing. */
interface ListPipelinesInput {
  readonly workspaceId: string;
  readonly state: string;
  readonly pageSize: number;
  readonly pageToken: string;
  /** Only the pipelines of these workspaces and those this identity submitted (a scoped reader). */
  readonly visibleTo?: { readonly spiffeId: string; readonly workspaces: readonly string[] };
}

/** Pipelines: submit, read, cancel, resume. Sequencing is sequence.ts. */
export interface Pipelines {
  submit(input: PipelineSubmission): Promise<PipelineView>;
  get(pipelineId: string): Promise<PipelineView>;
  list(input: ListPipelinesInput): Promise<{ pipelines: PipelineView[]; nextPageToken: string }>;
  cancel(pipelineId: string, by: string): Promise<PipelineView>;
  resume(pipelineId: string, fromStep: string): Promise<PipelineView>;
}

/**
 * The pipelines of a broker: `ctx` enqueues step jobs, `settled` is the broker's settle hook (a
 * cancel settles queued jobs).
 */
export function createPipelines(
  db: Kysely<Database>,
  ctx: StepEnqueue,
  settled: SettleHook,
): Pipelines {
  return {
    submit: (input) => submitPipeline(db, input, ctx),
    get: (id) => getPipeline(db, checkRowId("pipelineId", "pipeline", id)),
    list: (input) => listPipelines(db, input),
    cancel: (id, by) =>
      cancelPipeline(db, checkRowId("pipelineId", "pipeline", id), by, ctx, settled),
    resume: (id, fromStep) =>
      resumePipeline(db, checkRowId("pipelineId", "pipeline", id), fromStep, ctx),
  };
}

/**
 * Runs `fn` again when Postgres chose it as a deadlock victim (a cancel locks the pipeline, then
 * its jobs; a settle the other way round).
 */
async function retryingDeadlocks<T>(fn: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn();
    } catch (err) {
      if (attempt >= 5 || (err as { code?: string }).code !== "40P01") throw err;
    }
  }
}

/**
 * Checks a submission: the workspace, the name, the graph (graph.ts) and each
 * step's job fields by the enqueue's own rules (validateEnqueue), the step
 * named in the message.
 */
export function checkSubmission(input: PipelineSubmission, ctx: StepEnqueue): void {
  checkSegmentId("workspaceId", input.workspaceId);
  if (!input.name) bad("name is required: what the pipeline is called in views and events");
  if (input.name.length > 200) bad("name is longer than 200 characters");
  if (input.idempotencyKey.length > 200) bad("idempotencyKey is longer than 200 characters");
  checkGraph(input.steps);
  input.steps.forEach((s, i) => {
    try {
      validateEnqueue({ ...s, workspaceId: input.workspaceId, idempotencyKey: "" }, ctx.timeouts);
    } catch (err) {
      if (err instanceof ConnectError)
        throw new ConnectError(`steps[${i}] (${s.name}): ${err.rawMessage}`, err.code);
      throw err;
    }
    if (hasSecrets(s) && !ctx.box)
      bad(
        `steps[${i}] (${s.name}): this control plane has no secrets key, so it cannot store a step's secrets`,
      );
  });
}

/** A step's (or a schedule's job template's) job fields as stored, secrets apart. */
export function storedRequest(
  s: Omit<StoredStepRequest, "runAt"> & Pick<EnqueueInput, "runAt">,
): StoredStepRequest {
  return {
    labels: [...s.labels],
    repository: s.repository,
    targetBranch: s.targetBranch,
    spec: s.spec,
    maxAttempts: s.maxAttempts,
    priority: s.priority,
    kind: jobKindOf(s),
    runAt: s.runAt?.toISOString(),
    delaySeconds: s.delaySeconds,
    concurrencyKey: s.concurrencyKey || undefined,
    concurrencyLimit: s.concurrencyKey ? s.concurrencyLimit : undefined,
    fairnessKey: s.fairnessKey || undefined,
    rateLimit: s.rateLimit || undefined,
    backoff: s.backoff,
    requirements: s.requirements,
    idToken: s.idToken,
    displayName: s.displayName || undefined,
  };
}

/**
 * Stores a pipeline and queues its first steps, in `db`'s transaction when it is one (a schedule's
 * fire), else in a new one.
 */
export async function submitPipeline(
  db: Kysely<Database>,
  input: PipelineSubmission,
  ctx: StepEnqueue,
): Promise<PipelineView> {
  checkSubmission(input, ctx);
  // Outside the transaction: the code host may look a branch up, and must not hold the pipeline's
  // lock meanwhile.
  for (const s of input.steps) {
    if (!s.repository) continue;
    if (!ctx.code)
      bad(
        `steps (${s.name}): repository ${JSON.stringify(s.repository)} is not ` +
          `registered: this control plane serves no code routes`,
      );
    await ctx.code.checkTarget(s.repository, s.targetBranch);
  }
  const steps = input.steps.map((s) => ({
    name: s.name,
    needs: [...s.needs],
    inputs: s.inputs.map((i) => ({
      step: i.step,
      name: i.name,
      glob: i.glob,
      optional: i.optional || undefined,
    })),
    allowFailure: s.allowFailure,
    request: storedRequest(s),
  }));
  const requestSha256 = createHash("sha256")
    .update(
      JSON.stringify([
        input.name,
        steps,
        input.steps.map((s) => (hasSecrets(s) ? secretsDigest(ctx.box!, s) : [])),
      ]),
    )
    .digest("hex");
  const id = newJobId();
  const inserted = await inTransaction(db, async (tx) => {
    const row = await tx
      .insertInto("pipelines")
      .values({
        id,
        workspace_id: input.workspaceId,
        name: input.name,
        idempotency_key: input.idempotencyKey || null,
        request_sha256: requestSha256,
        state: "queued",
        enqueued_by: input.enqueuedBy ?? null,
      })
      .onConflict((oc) => oc.columns(["workspace_id", "idempotency_key"]).doNothing())
      .returning("id")
      .executeTakeFirst();
    if (!row) return false;
    await tx
      .insertInto("pipeline_steps")
      .values(
        steps.map((s, ord) => ({
          pipeline_id: id,
          name: s.name,
          ord,
          needs: s.needs,
          allow_failure: s.allowFailure,
          inputs: JSON.stringify(s.inputs),
          request: JSON.stringify(s.request),
          state: "pending" as const,
        })),
      )
      .execute();
    const secretRows = input.steps.flatMap((s) => [
      ...Object.entries(s.secrets ?? {}).map(([name, value]) => ({
        step: s.name,
        kind: "env" as const,
        name,
        value,
      })),
      ...Object.entries(s.secretFiles ?? {}).map(([name, value]) => ({
        step: s.name,
        kind: "file" as const,
        name,
        value,
      })),
    ]);
    if (secretRows.length) {
      await tx
        .insertInto("pipeline_step_secrets")
        .values(
          secretRows.map((r) => ({
            pipeline_id: id,
            step: r.step,
            kind: r.kind,
            name: r.name,
            sealed: ctx.box!.seal(r.value, pipelineStepSecretBinding(id, r.step, r.kind, r.name)),
          })),
        )
        .execute();
    }
    await recordEvent(tx, {
      type: "pipeline.queued",
      workspaceId: input.workspaceId,
      data: { pipelineId: id, name: input.name, steps: steps.length },
    });
    await advancePipeline(tx, id, ctx);
    return true;
  });
  if (inserted) return getPipeline(db, id);
  const existing = await db
    .selectFrom("pipelines")
    .selectAll()
    .where("workspace_id", "=", input.workspaceId)
    .where("idempotency_key", "=", input.idempotencyKey)
    .executeTakeFirstOrThrow();
  if (existing.enqueued_by && input.enqueuedBy && existing.enqueued_by !== input.enqueuedBy) {
    throw new ConnectError(
      `idempotencyKey ${JSON.stringify(input.idempotencyKey)} was already used ` +
        `in workspace "${input.workspaceId}" by another identity; use a new key`,
      Code.Aborted,
    );
  }
  if (existing.request_sha256 !== requestSha256) {
    throw new ConnectError(
      `idempotencyKey ${JSON.stringify(input.idempotencyKey)} was already used ` +
        `in workspace "${input.workspaceId}" for pipeline ${existing.id} with a ` +
        `different request; use a new key`,
      Code.Aborted,
    );
  }
  return getPipeline(db, existing.id);
}

async function getPipeline(db: Kysely<Database>, id: string): Promise<PipelineView> {
  const row = await db.selectFrom("pipelines").selectAll().where("id", "=", id).executeTakeFirst();
  if (!row) throw new ConnectError(`pipeline ${id} not found`, Code.NotFound);
  return (await views(db, [row]))[0]!;
}

type PipelineRow = Selectable<PipelinesTable>;

/**
 * The views of pipeline rows with their steps; a queued step whose job a runner holds shows as
 * running.
 */
async function views(db: Kysely<Database>, rows: readonly PipelineRow[]): Promise<PipelineView[]> {
  if (!rows.length) return [];
  const steps = await db
    .selectFrom("pipeline_steps as s")
    .leftJoin("jobs as j", "j.id", "s.job_id")
    .select([
      "s.pipeline_id",
      "s.name",
      "s.needs",
      "s.state",
      "s.attempts",
      "s.job_id",
      "s.allow_failure",
      "s.inputs",
      "s.request",
      "j.state as job_state",
    ])
    .where(
      "s.pipeline_id",
      "in",
      rows.map((r) => r.id),
    )
    .orderBy("s.ord")
    .execute();
  return rows.map((p) => {
    const own = steps
      .filter((s) => s.pipeline_id === p.id)
      .map((s) =>
        definedOnly({
          name: s.name,
          needs: s.needs,
          state: s.state === "queued" && s.job_state === "running" ? "running" : s.state,
          attempts: s.attempts,
          jobId: s.job_id || undefined,
          allowFailure: s.allow_failure,
          displayName: (s.request as unknown as StoredStepRequest).displayName,
          inputs: (s.inputs as unknown as StepInputSpec[]).map((i) =>
            definedOnly({
              step: i.step,
              name: i.name || undefined,
              glob: i.glob || undefined,
              optional: i.optional || undefined,
            }),
          ),
        }),
      );
    const state =
      p.state === "queued" && own.some((s) => s.state === "running") ? "running" : p.state;
    return definedOnly({
      id: p.id,
      workspaceId: p.workspace_id,
      name: p.name,
      state,
      cancelRequested: p.cancel_requested,
      idempotencyKey: p.idempotency_key || undefined,
      steps: own,
      createdAt: p.created_at.toISOString(),
      updatedAt: p.updated_at.toISOString(),
      settledAt: p.settled_at?.toISOString(),
    });
  });
}

/** Pipelines newest first, keyset-paged by the job listing's token rule (job-list.ts). */
async function listPipelines(
  db: Kysely<Database>,
  input: ListPipelinesInput,
): Promise<{ pipelines: PipelineView[]; nextPageToken: string }> {
  if (input.state && !jobStates.includes(input.state as JobState))
    bad(`state ${JSON.stringify(input.state.slice(0, 40))} is not one of ${jobStates.join(", ")}`);
  if (input.pageSize < 0 || input.pageSize > 500)
    bad(`pageSize must be 1 to 500 (0 means 50); got ${input.pageSize}`);
  const pageSize = input.pageSize || 50;
  let query = db
    .selectFrom("pipelines")
    .selectAll()
    .select(pageKey.as("page_key"))
    .orderBy("created_at", "desc")
    .orderBy("id", "desc")
    .limit(pageSize + 1);
  if (input.workspaceId) query = query.where("workspace_id", "=", input.workspaceId);
  if (input.state) query = query.where("state", "=", input.state as JobState);
  const reader = input.visibleTo;
  if (reader)
    query = query.where((eb) =>
      eb.or([
        eb("enqueued_by", "=", reader.spiffeId),
        ...(reader.workspaces.length ? [eb("workspace_id", "in", reader.workspaces)] : []),
      ]),
    );
  if (input.pageToken) query = query.where(afterPageToken(input.pageToken, "desc"));
  const rows = await query.execute();
  const page = rows.slice(0, pageSize);
  const last = page[page.length - 1];
  return {
    pipelines: await views(
      db,
      page.map(({ page_key: _k, ...r }) => r),
    ),
    nextPageToken: rows.length > pageSize && last ? pageTokenOf(last) : "",
  };
}

/** Locks a pipeline row in `tx`, or not_found. */
async function lockPipeline(tx: Transaction<Database>, id: string) {
  const row = await tx
    .selectFrom("pipelines")
    .selectAll()
    .where("id", "=", id)
    .forUpdate()
    .executeTakeFirst();
  if (!row) throw new ConnectError(`pipeline ${id} not found`, Code.NotFound);
  return row;
}

/**
 * Cancels a pipeline: pending steps are cancelled, each step job still
 * queued or running is cancelled as a job (queued at once, running through
 * its runner), and the pipeline settles as cancelled when the last settles.
 * A settled pipeline is returned as it is.
 */
/**
 * Cancels a pipeline's open steps and settles it, in `db`'s transaction when it is one (a
 * schedule's cancelPrevious), else in a new one.
 */
export async function cancelPipeline(
  db: Kysely<Database>,
  id: string,
  by: string,
  ctx: StepEnqueue,
  settled: SettleHook,
): Promise<PipelineView> {
  await retryingDeadlocks(() =>
    inTransaction(db, async (tx) => {
      const p = await lockPipeline(tx, id);
      if (p.settled_at) return;
      await tx
        .updateTable("pipelines")
        .set({ cancel_requested: true, updated_at: new Date() })
        .where("id", "=", id)
        .execute();
      const open = await tx
        .selectFrom("pipeline_steps as s")
        .innerJoin("jobs as j", "j.id", "s.job_id")
        .select("j.id")
        .where("s.pipeline_id", "=", id)
        .where("j.state", "in", ["queued", "running"])
        .execute();
      for (const j of open) await cancelJob(tx, j.id, by, settled);
      await advancePipeline(tx, id, ctx);
    }),
  );
  return getPipeline(db, id);
}

/**
 * Resumes a settled pipeline: every step that did not succeed (or, with
 * `fromStep`, that step and every step downstream of it) is pending again and
 * gets a new job once its needs pass; succeeded steps outside that set keep
 * their jobs and outputs.
 */
async function resumePipeline(
  db: Kysely<Database>,
  id: string,
  fromStep: string,
  ctx: StepEnqueue,
): Promise<PipelineView> {
  await db.transaction().execute(async (tx) => {
    const p = await lockPipeline(tx, id);
    if (!p.settled_at)
      throw new ConnectError(
        `pipeline ${id} is still ${p.state}; resume it once it settled (or cancel it first)`,
        Code.FailedPrecondition,
      );
    const steps = await tx
      .selectFrom("pipeline_steps")
      .select(["name", "needs", "state"])
      .where("pipeline_id", "=", id)
      .execute();
    if (fromStep && !steps.some((s) => s.name === fromStep))
      bad(
        `fromStep ${JSON.stringify(fromStep.slice(0, 80))} is not a step of ` +
          `pipeline ${id}; its steps are ${steps.map((s) => s.name).join(", ")}`,
      );
    const again = fromStep
      ? downstream(
          fromStep,
          steps.map((s) => ({ ...s, inputs: [] })),
        )
      : new Set(steps.filter((s) => s.state !== "succeeded").map((s) => s.name));
    if (!again.size)
      throw new ConnectError(
        `every step of pipeline ${id} succeeded; name fromStep to run steps again`,
        Code.FailedPrecondition,
      );
    if (p.state === "succeeded") {
      // A succeeded pipeline's step secrets were erased (sequence.ts): steps that had some cannot
      // run again.
      const withSecrets = await tx
        .selectFrom("pipeline_steps as s")
        .innerJoin("jobs as j", "j.id", "s.job_id")
        .select("s.name")
        .where("s.pipeline_id", "=", id)
        .where("s.name", "in", [...again])
        .where((eb) =>
          eb.or([
            eb(eb.fn("cardinality", ["j.secret_names"]), ">", 0),
            eb(eb.fn("cardinality", ["j.secret_file_names"]), ">", 0),
          ]),
        )
        .execute();
      if (withSecrets.length)
        throw new ConnectError(
          `pipeline ${id} succeeded and the secrets of ` +
            `${withSecrets.map((r) => r.name).join(", ")} were erased; submit it ` +
            `again`,
          Code.FailedPrecondition,
        );
    }
    await tx
      .updateTable("pipeline_steps")
      .set({ state: "pending", job_id: null, updated_at: new Date() })
      .where("pipeline_id", "=", id)
      .where("name", "in", [...again])
      .execute();
    await tx
      .updateTable("pipelines")
      .set({ state: "queued", cancel_requested: false, settled_at: null, updated_at: new Date() })
      .where("id", "=", id)
      .execute();
    await recordEvent(tx, {
      type: "pipeline.queued",
      workspaceId: p.workspace_id,
      data: { pipelineId: id, name: p.name, resumed: [...again] },
    });
    await advancePipeline(tx, id, ctx);
  });
  return getPipeline(db, id);
}
