import { createHash } from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import { sql, type Insertable, type Kysely, type RawBuilder, type Transaction } from "kysely";
import type { Database } from "../../store/schema.js";
import { newJobId } from "../ids.js";
import { jobSnapshot, type JobRow, type JobSnapshot } from "./snapshot.js";
import type { CodeHooks } from "../leases/pinning.js";
import { notifyJobs } from "../leases/sql-fragments.js";
import { inTransaction } from "../../store/transaction.js";
import { statementShapes } from "../../store/statement-shapes.js";
import { isStepJob } from "../pipelines/settle-hook.js";
import type { SecretBox } from "../../secrets/box.js";
import { hasSecrets, secretNames, secretsDigest, storeJobSecrets } from "./secrets.js";
import { applyGroupPolicy, hasGroupPolicy } from "./group-policy.js";
import { checkRateLimitsExist } from "./rate-limits.js";
import type { SettleHook } from "../pipelines/settle-hook.js";
import {
  bad,
  jobKindOf,
  jobLimits,
  scheduleLimits,
  validateEnqueue,
  type EnqueueInput,
  type JobTimeouts,
} from "./rules.js";

/**
 * The stored columns of an enqueue's scheduling fields (validated), and what of them goes into the
 * idempotency hash.
 */
function scheduleColumns(input: EnqueueInput) {
  const b = input.backoff;
  const r = input.requirements;
  const multiplier = b ? b.multiplier || 2 : null;
  const columns = {
    claimable_at: input.runAt
      ? input.runAt
      : input.delaySeconds
        ? (sql<Date>`now() + make_interval(secs => ${input.delaySeconds}::int)` as unknown as Date)
        : undefined,
    concurrency_key: input.concurrencyKey || null,
    concurrency_limit: input.concurrencyKey ? input.concurrencyLimit! : null,
    fairness_key: input.fairnessKey || null,
    rate_limit: input.rateLimit || null,
    backoff_initial_seconds: b ? b.initialSeconds : null,
    backoff_multiplier: multiplier,
    backoff_max_seconds: b
      ? b.maxSeconds || Math.max(b.initialSeconds, scheduleLimits.defaultBackoffMaxSeconds)
      : null,
    req_architecture: r?.architecture || null,
    req_os: r?.os || null,
    req_execution_kind: r?.executionKind || null,
    req_features: r ? [...new Set(r.features)].sort() : [],
    id_token_audiences: input.idToken ? [...new Set(input.idToken.allowedAudiences)].sort() : null,
  };
  // Only what was given, so the hash of a request without these fields is what it was before them.
  const hashed = Object.entries({
    runAt: input.runAt?.toISOString(),
    delaySeconds: input.delaySeconds,
    concurrency: input.concurrencyKey ? [input.concurrencyKey, input.concurrencyLimit] : undefined,
    fairnessKey: input.fairnessKey || undefined,
    rateLimit: input.rateLimit || undefined,
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
    idToken: columns.id_token_audiences ?? undefined,
  }).filter(([, v]) => v !== undefined);
  return { columns, hashed };
}

/**
 * An enqueue that passed its rules, with the row it stores and the hash its idempotency key is
 * compared by.
 */
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
    env: Object.keys(spec.env).length ? { ...spec.env } : undefined,
    timeoutSeconds: spec.timeoutSeconds || undefined,
    cpu: spec.cpu || undefined,
    memoryBytes: spec.memoryBytes ? String(spec.memoryBytes) : undefined,
  };
  // The timeout as asked for goes into the idempotency hash, so a retry still matches after the
  // default changed.
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
        // Only when given, so the hash of a request without one is what it was before names.
        ...(input.displayName ? [{ displayName: input.displayName }] : []),
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
    display_name: input.displayName || null,
    ...(withSecrets ? secretNames(input) : {}),
    ...schedule.columns,
  };
  return { input, row, requestSha256, withSecrets };
}

/**
 * What storing one prepared enqueue came to: its job (new, or the one its key named), or why it was
 * refused.
 */
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
 * direct handoff, src/broker/leases/handoff.ts): the runner, the hash of the lease
 * token made for it, and the lease length.
 */
export interface HandoffTarget {
  /** In the job's workspace: the reservation was made there. */
  readonly runnerId: string;
  readonly tokenHashHex: string;
  readonly leaseSeconds: number;
}

/**
 * The jobs row of the lease a handoff made, with whether its job is a pipeline step's (as a claim's
 * rows).
 */
export type HandedRow = JobRow & { readonly pipeline_step: boolean };

/**
 * A row of the enqueue statement: a stored job (handed false), or with a handoff, the job it leased
 * (handed true).
 */
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
  await checkRateLimitsExist(
    q,
    rows.flatMap((r) => (r.rate_limit ? [r.rate_limit] : [])),
  );
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
  // A handoff's statement answers the lease it made too (handed): the waiting runner's, on the new
  // job or an older one.
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
            sql<boolean>`(workspace_id, idempotency_key) in (select * from
              unnest(${repeats.map((p) => p.input.workspaceId)}::text[],
                ${repeats.map((p) => p.input.idempotencyKey)}::text[]))`,
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
        probed: probe ? probed.get(row.id) === true : undefined,
        handed,
      };
    const { input } = p;
    const found = byKey.get(`${input.workspaceId}\0${input.idempotencyKey}`)!;
    // A key is its enqueuer's: another identity repeating it would otherwise read back a job that
    // is not its own.
    if (found.enqueued_by && input.enqueuedBy && found.enqueued_by !== input.enqueuedBy) {
      return {
        refused: new ConnectError(
          `idempotencyKey ${JSON.stringify(input.idempotencyKey)} was already used ` +
            `in workspace "${input.workspaceId}" by another identity; use a new key`,
          Code.Aborted,
        ),
      };
    }
    if (found.request_sha256 !== p.requestSha256) {
      return {
        refused: new ConnectError(
          `idempotencyKey ${JSON.stringify(input.idempotencyKey)} was already used ` +
            `in workspace "${input.workspaceId}" for job ${found.id} with a ` +
            `different request; use a new key`,
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
 * names jobs_idempotency's predicate (only keyed jobs are in it), which Postgres
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
    select 'job.queued', ins.workspace_id, ins.id, jsonb_build_object('labels', ins.labels,
      'priority', ins.priority) from ins ${returning})`;
}

/**
 * The enqueue of one job that also claims for a runner waiting on this
 * replica (the direct handoff, src/broker/leases/handoff.ts): the row, its
 * `job.queued` event, then forelead_handoff (forelead_claim
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
        sql<JobRow>`(select c.* from ev cross join lateral
          forelead_handoff(ev.workspace_id, ${handoff.runnerId}, ${handoff.tokenHash}, ${handoff.leaseSeconds}::int)
          c)`,
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
      sql<never>`select claimed.*, null::bigint${sql.raw(probe ? ", null::boolean" : "")},
        true, ${isStepJob(sql.ref("claimed.id"))} from claimed`,
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

/**
 * An expression over the new jobs row (`ins`) that the enqueue's statement answers too: e.g.
 * waiting.ts runnableNow.
 */
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
 * once the enqueue passed its rules, never for a job with secrets or a concurrency-group policy,
 * which is applied first in the enqueue's transaction with `hook` settling what it cancels):
 * `handed` is the lease it made,
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
  hook?: SettleHook,
): Promise<{ job: JobSnapshot; probed?: boolean; handed?: HandedRow }> {
  const prepared = await prepareEnqueue(input, timeouts, code, box);
  const policy = hasGroupPolicy(input);
  const target = prepared.withSecrets || policy ? undefined : handoff?.();
  let stored: StoredEnqueue | undefined;
  if (prepared.withSecrets || policy)
    [stored] = await inTransaction(db, async (tx) => {
      if (policy) await applyGroupPolicy(tx, input, prepared.row.id, hook);
      return storeEnqueues(tx, [prepared], box, probe);
    });
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
    probed: stored.probed,
    handed: stored.handed,
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
