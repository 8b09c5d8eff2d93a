import { createHash } from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import { sql, type Insertable, type Kysely, type RawBuilder, type Transaction } from "kysely";
import type { Database, JobState } from "../store/schema.js";
import { checkJobId, newJobId } from "./ids.js";
import { jobSnapshot, type JobRow, type JobSnapshot } from "./job-snapshot.js";
import type { CodeHooks } from "./pinning.js";
import { notifyJobs } from "./lease-sql.js";
import { eventsCte } from "../events/record.js";
import { inTransaction } from "../store/transaction.js";
import { statementShapes } from "../store/statement-shapes.js";
import { isStepJob, settleWith, type SettleHook } from "./pipelines/settle-hook.js";
import { checkSegmentId } from "../identity/segment-id.js";
import type { SecretBox } from "../secrets/box.js";
import {
  hasSecrets,
  secretNames,
  secretsDigest,
  storeJobSecrets,
  validateSecrets,
  type JobSecretsInput,
} from "./job-secrets.js";

/** What to run. argv is an array, never a shell string. */
export interface JobSpecInput {
  readonly image: string;
  readonly argv: readonly string[];
  readonly env: Readonly<Record<string, string>>;
  readonly timeoutSeconds: number;
  readonly cpu: number;
  readonly memoryBytes: number;
}

/** An enqueue request, already decoded; its secrets (JobSecretsInput) are write-only. */
export interface EnqueueInput extends JobSecretsInput {
  readonly workspaceId: string;
  readonly labels: readonly string[];
  readonly repository: string;
  readonly targetBranch: string;
  readonly spec: JobSpecInput | undefined;
  readonly maxAttempts: number;
  readonly priority: number;
  readonly idempotencyKey: string;
  /** "command", "checkout" or "agent"; empty: checkout with a repository, command without. */
  readonly kind: string;
  /** The SPIFFE ID enqueueing it, stored as the job's owner. */
  readonly enqueuedBy?: string;
  /** Not claimable before then; excludes delaySeconds. */
  readonly runAt?: Date;
  /** Not claimable for this many seconds after the enqueue; undefined when not given. */
  readonly delaySeconds?: number;
  /** A concurrency group: at most concurrencyLimit jobs of the key run at once in the workspace. Empty: none. */
  readonly concurrencyKey?: string;
  readonly concurrencyLimit?: number;
  /** How retries are spaced; undefined: requeued at once. */
  readonly backoff?: BackoffInput;
  /** What a runner must have to be leased the job. */
  readonly requirements?: RequirementsInput;
}

/** A retry backoff as enqueued: multiplier 0 means 2, maxSeconds 0 means an hour (or initialSeconds when larger). */
export interface BackoffInput {
  readonly initialSeconds: number;
  readonly multiplier: number;
  readonly maxSeconds: number;
}

/** Runner capabilities a job requires; an empty field requires nothing. */
export interface RequirementsInput {
  readonly architecture: string;
  readonly os: string;
  readonly executionKind: string;
  readonly features: readonly string[];
}

/** How runners run jobs (RegisterRequest.executionKinds, Requirements.executionKind). */
export const executionKinds = ["docker", "process"] as const;

/** Bounds on scheduling fields; outside them an enqueue is refused by name. */
export const scheduleLimits = {
  maxDelaySeconds: 366 * 24 * 3600,
  maxBackoffSeconds: 7 * 24 * 3600,
  defaultBackoffMaxSeconds: 3600,
  maxMultiplier: 10,
  maxConcurrencyLimit: 10_000,
  maxFeatures: 32,
} as const;

/** A capability name: architecture, os or feature ("amd64", "linux", "cancel-v1"). */
const capabilityPattern = /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/;

/** Checks a capability name; throws invalid_argument naming `field`. */
export function checkCapability(field: string, value: string): void {
  if (!capabilityPattern.test(value))
    bad(
      `${field} ${JSON.stringify(value.slice(0, 70))} is not a capability name: 1 to 63 characters of A-Z a-z 0-9 . _ -, starting with a letter or digit`,
    );
}

/** Checks an execution kind; throws invalid_argument naming `field`. */
export function checkExecutionKind(field: string, value: string): void {
  if (!(executionKinds as readonly string[]).includes(value))
    bad(
      `${field} ${JSON.stringify(value.slice(0, 40))} is not an execution kind: one of ${executionKinds.join(", ")}`,
    );
}

/** Job kinds: a command runs without code; checkout and agent jobs get a base commit pinned at claim. */
export const jobKinds = ["command", "checkout", "agent"] as const;

/** The kind an enqueue asks for, its default filled in. */
export function jobKindOf(input: Pick<EnqueueInput, "kind" | "repository">): string {
  return input.kind || (input.repository ? "checkout" : "command");
}

/** Limits on what a job may ask for; outside them the enqueue is refused by name. */
export const jobLimits = {
  maxAttempts: 100,
  defaultMaxAttempts: 3,
  maxPriority: 1_000_000,
  maxArgs: 4096,
  maxEnv: 1024,
} as const;

/**
 * The control plane's job deadlines (forelead serve --default-job-timeout,
 * --max-job-timeout, --job-timeout-grace). A job's timeoutSeconds (the
 * default when it gives none) is stored in its spec, so the runner enforces
 * the same limit; the expiry sweep fails a job still running `graceSeconds`
 * after it, when the runner did not stop it.
 */
export interface JobTimeouts {
  readonly defaultSeconds: number;
  readonly maxSeconds: number;
  readonly graceSeconds: number;
}

/** 6 h by default (GitHub Actions' job limit), at most 7 days, 30 s of grace. */
export const defaultJobTimeouts: JobTimeouts = {
  defaultSeconds: 6 * 3600,
  maxSeconds: 7 * 24 * 3600,
  graceSeconds: 30,
};

const labelPattern = /^[A-Za-z0-9][A-Za-z0-9._:/=-]{0,62}$/;
const envName = /^[A-Za-z_][A-Za-z0-9_]*$/;
/** Every job state. */
export const jobStates: readonly JobState[] = [
  "queued",
  "running",
  "waiting_input",
  "succeeded",
  "failed",
  "cancelled",
];

/** Throws invalid_argument with the message. */
export function bad(message: string): never {
  throw new ConnectError(message, Code.InvalidArgument);
}

/** Checks runner labels; throws invalid_argument naming the first bad one as `field[i]`. */
export function checkLabels(field: string, labels: readonly string[]): void {
  labels.forEach(
    (l, i) =>
      labelPattern.test(l) ||
      bad(
        `${field}[${i}] ${JSON.stringify(l)} is not a label: 1 to 63 characters of A-Z a-z 0-9 . _ : / = -, starting with a letter or digit`,
      ),
  );
}

/** Checks an enqueue request; throws invalid_argument naming the first bad field. */
export function validateEnqueue(
  input: EnqueueInput,
  timeouts: JobTimeouts = defaultJobTimeouts,
): void {
  checkSegmentId("workspaceId", input.workspaceId);
  checkLabels("labels", input.labels);
  if (input.maxAttempts < 0 || input.maxAttempts > jobLimits.maxAttempts)
    bad(
      `maxAttempts must be 1 to ${jobLimits.maxAttempts} (0 means ${jobLimits.defaultMaxAttempts}); got ${input.maxAttempts}`,
    );
  if (Math.abs(input.priority) > jobLimits.maxPriority)
    bad(
      `priority must be between -${jobLimits.maxPriority} and ${jobLimits.maxPriority}; got ${input.priority}`,
    );
  if (input.idempotencyKey.length > 200) bad("idempotencyKey is longer than 200 characters");
  const kind = jobKindOf(input);
  if (!(jobKinds as readonly string[]).includes(kind))
    bad(`kind ${JSON.stringify(kind.slice(0, 40))} is not one of ${jobKinds.join(", ")}`);
  if (input.targetBranch && !input.repository) bad("targetBranch needs a repository");
  if (kind === "command" && input.repository)
    bad("a command job has no repository; use kind checkout or agent for a job with code");
  const aKind = kind === "agent" ? "an agent" : `a ${kind}`;
  if (kind !== "command" && !input.repository)
    bad(`${aKind} job needs a repository (a registered repository's name)`);
  if (kind !== "command" && !input.targetBranch)
    bad(`${aKind} job needs a targetBranch: the branch its base commit is pinned from at claim`);
  const spec = input.spec;
  if (!spec) bad("spec is required: {image, argv, env, timeoutSeconds, cpu, memoryBytes}");
  if (spec.argv.length === 0)
    bad('spec.argv is required: the command as an array, e.g. ["sh", "-c", "make test"]');
  if (spec.argv.length > jobLimits.maxArgs)
    bad(`spec.argv has ${spec.argv.length} entries; at most ${jobLimits.maxArgs} are allowed`);
  if (spec.image.length > 512) bad("spec.image is longer than 512 characters");
  if (!Number.isSafeInteger(spec.timeoutSeconds) || spec.timeoutSeconds < 0)
    bad(
      `spec.timeoutSeconds must be a whole number of seconds, 0 for this control plane's default of ${timeouts.defaultSeconds} s; got ${spec.timeoutSeconds}`,
    );
  if (spec.timeoutSeconds > timeouts.maxSeconds)
    bad(
      `spec.timeoutSeconds ${spec.timeoutSeconds} is over this control plane's maximum job timeout of ${timeouts.maxSeconds} s (forelead serve --max-job-timeout)`,
    );
  if (!(spec.cpu >= 0) || !Number.isFinite(spec.cpu))
    bad(`spec.cpu must be a non-negative number of cores; got ${spec.cpu}`);
  if (!(spec.memoryBytes >= 0) || !Number.isSafeInteger(spec.memoryBytes))
    bad(`spec.memoryBytes must be a non-negative byte count; got ${spec.memoryBytes}`);
  const env = Object.keys(spec.env);
  if (env.length > jobLimits.maxEnv)
    bad(`spec.env has ${env.length} entries; at most ${jobLimits.maxEnv} are allowed`);
  env.forEach(
    (k) =>
      envName.test(k) ||
      bad(
        `spec.env key ${JSON.stringify(k)} is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)`,
      ),
  );
  validateSecrets(input);
  validateSchedule(input);
}

/** The scheduling fields of an enqueue: when, how retries are spaced, its group, its requirements. */
function validateSchedule(input: EnqueueInput): void {
  if (input.runAt && input.delaySeconds !== undefined)
    bad(
      "runAt and delaySeconds exclude each other: give runAt (a time) or delaySeconds (from now), not both",
    );
  if (input.runAt && !(input.runAt.getTime() <= Date.now() + scheduleLimits.maxDelaySeconds * 1000))
    bad(
      `runAt ${input.runAt.toISOString()} is more than ${scheduleLimits.maxDelaySeconds} s (366 days) ahead`,
    );
  const delay = input.delaySeconds;
  if (
    delay !== undefined &&
    !(Number.isSafeInteger(delay) && delay >= 0 && delay <= scheduleLimits.maxDelaySeconds)
  )
    bad(
      `delaySeconds must be a whole number of seconds from 0 to ${scheduleLimits.maxDelaySeconds}; got ${delay}`,
    );
  const key = input.concurrencyKey ?? "";
  const limit = input.concurrencyLimit ?? 0;
  if (key && !labelPattern.test(key))
    bad(
      `concurrencyKey ${JSON.stringify(key.slice(0, 70))} is not a group name: 1 to 63 characters of A-Z a-z 0-9 . _ : / = -, starting with a letter or digit`,
    );
  if (!key && limit !== 0)
    bad("concurrencyLimit needs a concurrencyKey: the group whose running jobs it bounds");
  if (
    key &&
    !(Number.isInteger(limit) && limit >= 1 && limit <= scheduleLimits.maxConcurrencyLimit)
  )
    bad(
      `concurrencyLimit must be 1 to ${scheduleLimits.maxConcurrencyLimit} with a concurrencyKey (how many jobs of the group may run at once); got ${limit}`,
    );
  const b = input.backoff;
  if (b) {
    if (!(b.initialSeconds > 0 && b.initialSeconds <= scheduleLimits.maxBackoffSeconds))
      bad(
        `backoff.initialSeconds must be more than 0 and at most ${scheduleLimits.maxBackoffSeconds}; got ${b.initialSeconds}`,
      );
    if (!(
      b.multiplier === 0 ||
      (b.multiplier >= 1 && b.multiplier <= scheduleLimits.maxMultiplier)
    ))
      bad(
        `backoff.multiplier must be 1 to ${scheduleLimits.maxMultiplier} (0 means 2); got ${b.multiplier}`,
      );
    if (!(
      b.maxSeconds === 0 ||
      (b.maxSeconds >= b.initialSeconds && b.maxSeconds <= scheduleLimits.maxBackoffSeconds)
    ))
      bad(
        `backoff.maxSeconds must be 0 (an hour) or from backoff.initialSeconds (${b.initialSeconds}) to ${scheduleLimits.maxBackoffSeconds}; got ${b.maxSeconds}`,
      );
  }
  const r = input.requirements;
  if (r) {
    if (r.architecture) checkCapability("requirements.architecture", r.architecture);
    if (r.os) checkCapability("requirements.os", r.os);
    if (r.executionKind) checkExecutionKind("requirements.executionKind", r.executionKind);
    if (r.features.length > scheduleLimits.maxFeatures)
      bad(
        `requirements.features has ${r.features.length} entries; at most ${scheduleLimits.maxFeatures} are allowed`,
      );
    r.features.forEach((f, i) => checkCapability(`requirements.features[${i}]`, f));
  }
}

/** The stored columns of an enqueue's scheduling fields (validated), and what of them goes into the idempotency hash. */
function scheduleColumns(input: EnqueueInput) {
  const b = input.backoff;
  const r = input.requirements;
  const multiplier = b ? b.multiplier || 2 : null;
  const columns = {
    ...(input.runAt
      ? { claimable_at: input.runAt }
      : input.delaySeconds
        ? {
            claimable_at:
              sql<Date>`now() + make_interval(secs => ${input.delaySeconds}::int)` as unknown as Date,
          }
        : {}),
    concurrency_key: input.concurrencyKey || null,
    concurrency_limit: input.concurrencyKey ? input.concurrencyLimit! : null,
    backoff_initial_seconds: b ? b.initialSeconds : null,
    backoff_multiplier: multiplier,
    backoff_max_seconds: b
      ? b.maxSeconds || Math.max(b.initialSeconds, scheduleLimits.defaultBackoffMaxSeconds)
      : null,
    req_architecture: r?.architecture || null,
    req_os: r?.os || null,
    req_execution_kind: r?.executionKind || null,
    req_features: r ? [...new Set(r.features)].sort() : [],
  };
  // Only what was given, so the hash of a request without these fields is what it was before them.
  const hashed = Object.entries({
    runAt: input.runAt?.toISOString(),
    delaySeconds: input.delaySeconds,
    concurrency: input.concurrencyKey ? [input.concurrencyKey, input.concurrencyLimit] : undefined,
    backoff: b
      ? [columns.backoff_initial_seconds, columns.backoff_multiplier, columns.backoff_max_seconds]
      : undefined,
    requirements:
      r && (r.architecture || r.os || r.executionKind || r.features.length)
        ? [
            columns.req_architecture,
            columns.req_os,
            columns.req_execution_kind,
            columns.req_features,
          ]
        : undefined,
  }).filter(([, v]) => v !== undefined);
  return { columns, hashed };
}

/** An enqueue that passed its rules, with the row it stores and the hash its idempotency key is compared by. */
export interface PreparedEnqueue {
  readonly input: EnqueueInput;
  readonly row: Insertable<Database["jobs"]> & { readonly id: string };
  readonly requestSha256: string;
  readonly withSecrets: boolean;
}

/**
 * Checks an enqueue (validateEnqueue, the secrets key, the repository and
 * branch) and builds its row; a job without a timeout gets the server's
 * default one. Throws naming the first thing wrong.
 */
export async function prepareEnqueue(
  input: EnqueueInput,
  timeouts: JobTimeouts,
  code?: CodeHooks,
  box?: SecretBox,
): Promise<PreparedEnqueue> {
  validateEnqueue(input, timeouts);
  const withSecrets = hasSecrets(input);
  if (withSecrets && !box)
    bad("this control plane has no secrets key, so it cannot store a job's secrets");
  const kind = jobKindOf(input);
  if (input.repository) {
    if (!code)
      bad(
        `repository ${JSON.stringify(input.repository)} is not registered: this control plane serves no code routes`,
      );
    await code.checkTarget(input.repository, input.targetBranch);
  }
  const spec = input.spec!;
  const requestedSpec = {
    image: spec.image,
    argv: [...spec.argv],
    ...(Object.keys(spec.env).length ? { env: { ...spec.env } } : {}),
    ...(spec.timeoutSeconds ? { timeoutSeconds: spec.timeoutSeconds } : {}),
    ...(spec.cpu ? { cpu: spec.cpu } : {}),
    ...(spec.memoryBytes ? { memoryBytes: String(spec.memoryBytes) } : {}),
  };
  // The timeout as asked for goes into the idempotency hash, so a retry still matches after the default changed.
  const storedSpec = {
    ...requestedSpec,
    timeoutSeconds: spec.timeoutSeconds || timeouts.defaultSeconds,
  };
  const labels = [...new Set(input.labels)].sort();
  const maxAttempts = input.maxAttempts || jobLimits.defaultMaxAttempts;
  const schedule = scheduleColumns(input);
  const requestSha256 = createHash("sha256")
    .update(
      JSON.stringify([
        labels,
        requestedSpec,
        maxAttempts,
        input.priority,
        input.repository,
        input.targetBranch,
        ...(kind === "agent" ? [kind] : []),
        ...(withSecrets ? [secretsDigest(box!, input)] : []),
        ...(schedule.hashed.length ? [schedule.hashed] : []),
      ]),
    )
    .digest("hex");
  const row = {
    id: newJobId(),
    workspace_id: input.workspaceId,
    labels,
    kind,
    repository: input.repository || null,
    target_branch: input.targetBranch || null,
    spec: JSON.stringify(storedSpec),
    state: "queued" as const,
    priority: input.priority,
    max_attempts: maxAttempts,
    idempotency_key: input.idempotencyKey || null,
    request_sha256: requestSha256,
    enqueued_by: input.enqueuedBy ?? null,
    ...(withSecrets ? secretNames(input) : {}),
    ...schedule.columns,
  };
  return { input, row, requestSha256, withSecrets };
}

/** What storing one prepared enqueue came to: its job (new, or the one its key named), or why it was refused. */
export type StoredEnqueue =
  | {
      readonly job: JobRow;
      readonly created: boolean;
      readonly probed?: boolean;
      readonly handed?: HandedRow;
    }
  | { readonly refused: ConnectError };

/**
 * The waiting claim an enqueue may lease a job to in its own statement (the
 * direct handoff, src/broker/handoff.ts): the runner, the hash of the lease
 * token made for it, and the lease length.
 */
export interface HandoffTarget {
  /** In the job's workspace: the reservation was made there. */
  readonly runnerId: string;
  readonly tokenHashHex: string;
  readonly leaseSeconds: number;
}

/** The jobs row of the lease a handoff made, with whether its job is a pipeline step's (as a claim's rows). */
export type HandedRow = JobRow & { readonly pipeline_step: boolean };

/** A row of the enqueue statement: a stored job (handed false), or with a handoff, the job it leased (handed true). */
type EnqueueReturned = JobRow & {
  readonly woken: unknown;
  readonly probed?: boolean;
  readonly handed?: boolean;
  readonly pipeline_step?: boolean;
};

/**
 * Stores prepared enqueues, queued, in one statement: the rows, one
 * `job.queued` event each, and one wakeup per workspace (a repeat of an
 * idempotency key wakes nobody). One round trip and one commit instead of
 * four: under load each round trip waits for the event loop, and enqueue
 * latency is pickup latency. Jobs with secrets add their rows (sealed with
 * `box`) in the same transaction, so `q` must be one when any has secrets
 * (the wake is sent at its commit). The same idempotencyKey in the same
 * workspace returns the job stored first; with a different request, or from
 * another identity, it is refused (409), since silently returning a job that
 * runs something else would be worse. The idempotency hash compares the
 * secrets' keyed hashes, never their values. Results are in `prepared`'s order.
 */
export async function storeEnqueues(
  q: Kysely<Database>,
  prepared: readonly PreparedEnqueue[],
  box?: SecretBox,
  probe?: JobProbe,
  handoff?: HandoffTarget,
): Promise<StoredEnqueue[]> {
  const rows = prepared.map((p) => p.row);
  if (handoff && (rows.length !== 1 || prepared[0]!.withSecrets))
    throw new Error("a handoff is made by the enqueue of one job without secrets");
  // One job (every single enqueue) is sent as its compiled shape; a batch is built as it comes.
  const returned: EnqueueReturned[] = handoff
    ? (
        await oneHandoffEnqueue.execute(
          q,
          {
            ...rows[0]!,
            handoffRunnerId: handoff.runnerId,
            handoffTokenHash: handoff.tokenHashHex,
            handoffLeaseSeconds: handoff.leaseSeconds,
          },
          probe,
        )
      ).rows
    : rows.length === 1
      ? (await oneEnqueue.execute(q, rows[0]!, probe)).rows
      : await enqueueStatement(q, rows, probe).execute();
  // A handoff's statement answers the lease it made too (handed): the waiting runner's, on the new job or an older one.
  const inserted = returned.filter((r) => !r.handed);
  const leased = returned.find((r) => r.handed);
  const handed =
    leased &&
    (({ woken: _woken, probed: _probed, handed: _handed, ...row }) => row as HandedRow)(leased);
  const probed = new Map(inserted.map((r) => [r.id, r.probed]));
  const byId = new Map(
    inserted.map(
      ({ woken: _woken, probed: _probed, handed: _handed, pipeline_step: _step, ...row }) => [
        row.id,
        (row.id === handed?.id ? handed : row) as JobRow,
      ],
    ),
  );
  for (const p of prepared)
    if (p.withSecrets && byId.has(p.row.id))
      await storeJobSecrets(q as Transaction<Database>, box!, p.row.id, p.input);
  const repeats = prepared.filter((p) => !byId.has(p.row.id));
  const existing =
    repeats.length === 0
      ? []
      : await q
          .selectFrom("jobs")
          .selectAll()
          .where(
            sql<boolean>`(workspace_id, idempotency_key) in (select * from unnest(${repeats.map((p) => p.input.workspaceId)}::text[], ${repeats.map((p) => p.input.idempotencyKey)}::text[]))`,
          )
          .execute();
  const byKey = new Map(
    existing.map((row) => [`${row.workspace_id}\0${row.idempotency_key}`, row]),
  );
  return prepared.map((p): StoredEnqueue => {
    const row = byId.get(p.row.id);
    if (row)
      return {
        job: row,
        created: true,
        ...(probe ? { probed: probed.get(row.id) === true } : {}),
        ...(handed ? { handed } : {}),
      };
    const { input } = p;
    const found = byKey.get(`${input.workspaceId}\0${input.idempotencyKey}`)!;
    // A key is its enqueuer's: another identity repeating it would otherwise read back a job that is not its own.
    if (found.enqueued_by && input.enqueuedBy && found.enqueued_by !== input.enqueuedBy) {
      return {
        refused: new ConnectError(
          `idempotencyKey ${JSON.stringify(input.idempotencyKey)} was already used in workspace "${input.workspaceId}" by another identity; use a new key`,
          Code.Aborted,
        ),
      };
    }
    if (found.request_sha256 !== p.requestSha256) {
      return {
        refused: new ConnectError(
          `idempotencyKey ${JSON.stringify(input.idempotencyKey)} was already used in workspace "${input.workspaceId}" for job ${found.id} with a different request; use a new key`,
          Code.Aborted,
        ),
      };
    }
    return { job: found, created: false };
  });
}

/**
 * The statement of storeEnqueues: the rows, their `job.queued` events, one
 * wake per workspace, and `probe` over each new row.
 */
function enqueueStatement(
  q: Kysely<Database>,
  rows: readonly Insertable<Database["jobs"]>[],
  probe: JobProbe | undefined,
) {
  return insertedJobs(q, rows)
    .with("wake", (qb) =>
      qb
        .selectFrom("ins")
        .select(notifyJobs(sql.ref("ins.workspace_id"), sql`min(ins.claimable_at)`).as("sent"))
        .groupBy("ins.workspace_id"),
    )
    .with("ev", () => queuedEvents())
    .selectFrom("ins")
    .selectAll("ins")
    .select((eb) => eb.selectFrom("wake").select(eb.fn.countAll<number>().as("n")).as("woken"))
    .$if(probe !== undefined, (qb) => qb.select(probe!("ins").as("probed")));
}

/**
 * The CTE `ins`: the new rows, a repeated idempotency key inserting nothing. The conflict target
 * names jobs_idempotency's predicate (migration 0027: only keyed jobs are in it), which Postgres
 * needs to infer that partial index as the arbiter.
 */
function insertedJobs(q: Kysely<Database>, rows: readonly Insertable<Database["jobs"]>[]) {
  return q.with("ins", (qb) =>
    qb
      .insertInto("jobs")
      .values(rows)
      .onConflict((oc) =>
        oc
          .columns(["workspace_id", "idempotency_key"])
          .where("idempotency_key", "is not", null)
          .doNothing(),
      )
      .returningAll(),
  );
}

/** The `job.queued` event of every row of `ins`, `returning` what a later CTE reads of it. */
function queuedEvents(returning: RawBuilder<unknown> = sql``) {
  return sql<{
    job_id: string;
    workspace_id: string;
  }>`(insert into events (type, workspace_id, job_id, data)
    select 'job.queued', ins.workspace_id, ins.id, jsonb_build_object('labels', ins.labels, 'priority', ins.priority) from ins ${returning})`;
}

/**
 * The enqueue of one job that also claims for a runner waiting on this
 * replica (the direct handoff, src/broker/handoff.ts): the row, its
 * `job.queued` event, then forelead_handoff (migration 0026, forelead_claim
 * for one request) for the runner. The call is lateral to the event's row,
 * so it runs after the insert and the event (the lease's `job.leased` comes
 * after `job.queued`), and as a VOLATILE function it takes a fresh snapshot
 * that sees the new row: it may lease that job, or an older one the runner
 * is owed first, or none. Until the statement commits nobody else sees the
 * job; after, it is running, so no claim of another replica can take it.
 * The notification is sent only when the new job was not the one leased.
 * Rows: the stored job (handed false) and the lease's job (handed true).
 */
function handoffStatement(
  q: Kysely<Database>,
  row: Insertable<Database["jobs"]>,
  handoff: { runnerId: string; tokenHash: string; leaseSeconds: number },
  probe: JobProbe | undefined,
) {
  return insertedJobs(q, [row])
    .with("ev", () => queuedEvents(sql`returning job_id, workspace_id`))
    .with(
      "claimed",
      () =>
        sql<JobRow>`(select c.* from ev cross join lateral forelead_handoff(ev.workspace_id, ${handoff.runnerId}, ${handoff.tokenHash}, ${handoff.leaseSeconds}::int) c)`,
    )
    .with(
      "wake",
      () => sql<{
        sent: string;
      }>`(select ${notifyJobs(sql.ref("ins.workspace_id"), sql`min(ins.claimable_at)`)} as sent from ins
      where not exists (select 1 from claimed where claimed.id = ins.id) group by ins.workspace_id)`,
    )
    .selectFrom("ins")
    .selectAll("ins")
    .select(sql<number>`(select count(*) from wake)`.as("woken"))
    .$if(probe !== undefined, (qb) => qb.select(probe!("ins").as("probed")))
    .select([sql<boolean>`false`.as("handed"), sql<boolean>`false`.as("pipeline_step")])
    .unionAll(
      sql<never>`select claimed.*, null::bigint${sql.raw(probe ? ", null::boolean" : "")}, true, ${isStepJob(sql.ref("claimed.id"))} from claimed`,
    );
}

const oneEnqueue = statementShapes(
  (q: Kysely<Database>, row: Insertable<Database["jobs"]>, probe: JobProbe | undefined) =>
    enqueueStatement(q, [row], probe),
);

const oneHandoffEnqueue = statementShapes(
  (
    q: Kysely<Database>,
    {
      handoffRunnerId,
      handoffTokenHash,
      handoffLeaseSeconds,
      ...row
    }: Insertable<Database["jobs"]> & {
      handoffRunnerId: string;
      handoffTokenHash: string;
      handoffLeaseSeconds: number;
    },
    probe: JobProbe | undefined,
  ) =>
    handoffStatement(
      q,
      row,
      { runnerId: handoffRunnerId, tokenHash: handoffTokenHash, leaseSeconds: handoffLeaseSeconds },
      probe,
    ),
);

/** An expression over the new jobs row (`ins`) that the enqueue's statement answers too: e.g. waiting.ts runnableNow. */
export type JobProbe = (alias: "ins") => RawBuilder<boolean>;

/**
 * Stores a job, queued, and wakes runners waiting in its workspace: the
 * rules of prepareEnqueue and storeEnqueues, for one job (a batch is
 * job-batch.ts). One statement without secrets; with them, one transaction.
 */
export async function enqueueJob(
  db: Kysely<Database>,
  input: EnqueueInput,
  timeouts: JobTimeouts,
  code?: CodeHooks,
  box?: SecretBox,
): Promise<JobSnapshot> {
  return (await enqueueProbed(db, input, timeouts, undefined, code, box)).job;
}

/**
 * enqueueJob, with `probe` answered by the same statement (`probed`; undefined when the key named a
 * job already stored), and a direct handoff when `handoff` names a waiting claim's runner (asked
 * once the enqueue passed its rules, never for a job with secrets): `handed` is the lease it made,
 * on this job or an older one. A handoff refused for its runner (retired while it waited: FL001) or
 * by a deadlock rolls the statement back whole, and the job is stored without it.
 */
export async function enqueueProbed(
  db: Kysely<Database>,
  input: EnqueueInput,
  timeouts: JobTimeouts,
  probe: JobProbe | undefined,
  code?: CodeHooks,
  box?: SecretBox,
  handoff?: () => HandoffTarget | undefined,
): Promise<{ job: JobSnapshot; probed?: boolean; handed?: HandedRow }> {
  const prepared = await prepareEnqueue(input, timeouts, code, box);
  const target = prepared.withSecrets ? undefined : handoff?.();
  let stored: StoredEnqueue | undefined;
  if (prepared.withSecrets)
    [stored] = await inTransaction(db, (tx) => storeEnqueues(tx, [prepared], box, probe));
  else {
    try {
      [stored] = await storeEnqueues(db, [prepared], box, probe, target);
    } catch (err) {
      if (!target || !["FL001", "40P01"].includes((err as { code?: string }).code ?? "")) throw err;
      [stored] = await storeEnqueues(db, [prepared], box, probe);
    }
  }
  if (!stored || "refused" in stored) throw stored?.refused ?? new Error("enqueue stored nothing");
  return {
    job: jobSnapshot(stored.job),
    ...(stored.probed !== undefined ? { probed: stored.probed } : {}),
    ...(stored.handed ? { handed: stored.handed } : {}),
  };
}

/** Whether any job is queued and due in the workspace (one probe of the claim index). */
export async function hasQueuedJobs(db: Kysely<Database>, workspaceId: string): Promise<boolean> {
  const row = await db
    .selectFrom("jobs")
    .select("id")
    .where("workspace_id", "=", workspaceId)
    .where("state", "=", "queued")
    .where("claimable_at", "<=", sql<Date>`now()`)
    .limit(1)
    .executeTakeFirst();
  return row !== undefined;
}

/** One job, or 404. */
export async function getJob(db: Kysely<Database>, jobId: string): Promise<JobSnapshot> {
  return jobSnapshot(await findJob(db, checkJobId(jobId)));
}

/** A job row, or not_found naming it. */
export async function findJob(db: Kysely<Database>, jobId: string): Promise<JobRow> {
  const row = await db.selectFrom("jobs").selectAll().where("id", "=", jobId).executeTakeFirst();
  if (!row) throw new ConnectError(`job ${jobId} not found`, Code.NotFound);
  return row;
}

/**
 * Cancels a job. Queued or waiting for input: settled as cancelled at once. Running: flagged; the
 * runner learns it on its next renew, and if it never settles the job, the
 * lease's expiry settles it as cancelled. Cancelling a cancelled job returns
 * it; a succeeded or failed job cannot be cancelled (409).
 */
export async function cancelJob(
  db: Kysely<Database>,
  jobId: string,
  by: string,
  hook?: SettleHook,
): Promise<JobSnapshot> {
  const id = checkJobId(jobId);
  // The events: job.cancel_requested the first time, then job.settled for a queued job settled at once
  // (read from the first insert's rows, so it comes after it; a queued job never has cancel_requested set).
  const rows = await settleWith(
    db,
    hook,
    async (q) =>
      (
        await sql<JobRow>`
    with old as (
      select id, state, cancel_requested from jobs where id = ${id} and state in ('queued', 'running', 'waiting_input') for update
    ), j as (
      update jobs set
        state = case when jobs.state in ('queued', 'waiting_input') then 'cancelled' else jobs.state end,
        settled_at = case when jobs.state in ('queued', 'waiting_input') then now() else settled_at end,
        failure_reason = case when jobs.state in ('queued', 'waiting_input') then 'cancelled' else failure_reason end,
        failure_message = case when jobs.state = 'queued' then ${`cancelled by ${by} before it was claimed`} when jobs.state = 'waiting_input' then ${`cancelled by ${by} while it waited for input`} else failure_message end,
        cancel_requested = true,
        updated_at = now()
      from old where jobs.id = old.id
      returning jobs.*, old.state as was_state, old.cancel_requested as was_requested
    ), ${eventsCte("requested", "j", { type: sql`'job.cancel_requested'`, workspaceId: sql`j.workspace_id`, jobId: sql`j.id`, data: sql`jsonb_build_object('state', j.was_state)` }, sql`not j.was_requested`)},
    ${eventsCte("settled", sql`requested join j on j.id = requested.job_id`, { type: sql`'job.settled'`, workspaceId: sql`j.workspace_id`, jobId: sql`j.id`, data: sql`jsonb_build_object('outcome', 'cancelled', 'errorCode', 'cancelled', 'attempt', j.attempts)` }, sql`j.was_state in ('queued', 'waiting_input')`)}
    select * from j`.execute(q)
      ).rows,
  );
  const row = rows[0];
  if (row) return jobSnapshot(row);
  const current = await findJob(db, id);
  if (current.state === "cancelled") return jobSnapshot(current);
  throw new ConnectError(
    `job ${id} already ${current.state}; there is nothing to cancel`,
    Code.Aborted,
  );
}
