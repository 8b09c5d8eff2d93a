import { Code, ConnectError } from "@connectrpc/connect";
import type { Kysely, Selectable } from "kysely";
import type { Database, JobsTable } from "../../store/schema.js";
import { definedOnly } from "../../protocol/defined-only.js";
import { checkJobId } from "../ids.js";
import { attemptHistory } from "./attempts.js";

/** A job row as read from the database. */
export type JobRow = Selectable<JobsTable>;

/**
 * The public view of a job, in the JSON names of the wire contract (proto3
 * JSON of forelead.runner.v1.Job). It never carries the lease token or its
 * hash. It is also what a completion stores as its reply, so a repeated
 * completion gets the very same answer.
 */
export type JobSnapshot = Record<string, unknown>;

/**
 * The snapshot of a job row; with `attempts` (attemptHistory's, in the admin views) its
 * attemptHistory.
 */
export function jobSnapshot(row: JobRow, attempts?: readonly unknown[]): JobSnapshot {
  const spec = row.spec as Record<string, unknown>;
  const out: JobSnapshot = {
    id: row.id,
    workspaceId: row.workspace_id,
    labels: row.labels,
    kind: row.kind,
    spec,
    state: row.state,
    attempts: row.attempts,
    maxAttempts: row.max_attempts,
    priority: row.priority,
    cancelRequested: row.cancel_requested,
    createdAt: iso(row.created_at),
    updatedAt: iso(row.updated_at),
  };
  codeFields(row, out);
  if (row.state === "running") {
    if (row.runner_id) out.runnerId = row.runner_id;
    if (row.lease_expires_at) out.leaseExpiresAt = iso(row.lease_expires_at);
  }
  if (row.exit_code !== null) out.exitCode = row.exit_code;
  if (row.error) out.error = row.error;
  if (row.failure_reason)
    out.failure = { reason: row.failure_reason, message: row.failure_message ?? "" };
  if (row.idempotency_key) out.idempotencyKey = row.idempotency_key;
  if (row.settled_at) out.settledAt = iso(row.settled_at);
  if (row.published_branch) out.publishedBranch = row.published_branch;
  if (row.artifacts?.length) out.artifacts = row.artifacts;
  // The names only: a secret's value is never part of any view (src/broker/jobs/secrets.ts).
  if (row.secret_names?.length) out.secretNames = row.secret_names;
  if (row.secret_file_names?.length) out.secretFileNames = row.secret_file_names;
  // When a queued job becomes claimable (its runAt, delay or retry backoff): shown while it waits.
  if (row.state === "queued" && row.claimable_at) out.claimableAt = iso(row.claimable_at);
  if (row.concurrency_key)
    Object.assign(out, {
      concurrencyKey: row.concurrency_key,
      concurrencyLimit: row.concurrency_limit,
    });
  if (row.fairness_key) out.fairnessKey = row.fairness_key;
  if (row.rate_limit) out.rateLimit = row.rate_limit;
  if (row.backoff_initial_seconds !== null && row.backoff_initial_seconds !== undefined) {
    out.backoff = {
      initialSeconds: row.backoff_initial_seconds,
      multiplier: row.backoff_multiplier,
      maxSeconds: row.backoff_max_seconds,
    };
  }
  const requirements = definedOnly({
    architecture: row.req_architecture || undefined,
    os: row.req_os || undefined,
    executionKind: row.req_execution_kind || undefined,
    features: row.req_features?.length ? row.req_features : undefined,
  });
  if (Object.keys(requirements).length) out.requirements = requirements;
  // docs/job-contract.md: the result the settling completion reported, and the last progress.
  if (row.result) out.result = row.result;
  if (row.progress) out.progress = row.progress;
  if (row.display_name) out.displayName = row.display_name;
  if (row.retry_of) out.retryOf = row.retry_of;
  if (row.retried_by) out.retriedBy = row.retried_by;
  if (attempts?.length) out.attemptHistory = attempts;
  return out;
}

/** The columns of a job a runner sees in its lease (leasedJobSnapshot). */
export const leasedJobColumns = [
  "id",
  "workspace_id",
  "labels",
  "kind",
  "spec",
  "repository",
  "target_branch",
  "base_commit",
  "base_tree",
  "published_commit",
  "id_token_audiences",
] as const satisfies readonly (keyof JobRow)[];

/** A job row with at least the columns a lease shows. */
export type LeasedJobRow = Pick<JobRow, (typeof leasedJobColumns)[number]>;

/** The part of a job a runner sees in its lease: jobSnapshot's fields of those columns. */
export function leasedJobSnapshot(row: LeasedJobRow): JobSnapshot {
  const out: JobSnapshot = {
    id: row.id,
    workspaceId: row.workspace_id,
    labels: row.labels,
    kind: row.kind,
    spec: row.spec as Record<string, unknown>,
  };
  codeFields(row, out);
  return out;
}

/**
 * The code a job works on, when it has any. publishedCommit is in a lease too (additive): a
 * runner that takes over an agent job learns what it may ask a published bundle for.
 */
function codeFields(
  row: Pick<
    JobRow,
    | "repository"
    | "target_branch"
    | "base_commit"
    | "base_tree"
    | "published_commit"
    | "id_token_audiences"
  >,
  out: JobSnapshot,
): void {
  // The audiences it may be given ID tokens for: a lease carries them so the runner asks for each.
  if (row.id_token_audiences) out.idTokenAudiences = row.id_token_audiences;
  if (row.repository) out.repository = row.repository;
  if (row.target_branch) out.targetBranch = row.target_branch;
  if (row.base_commit) out.baseCommit = row.base_commit;
  if (row.base_tree) out.baseTree = row.base_tree;
  if (row.published_commit) out.publishedCommit = row.published_commit;
}

function iso(d: Date | string): string {
  return (d instanceof Date ? d : new Date(d)).toISOString();
}

/** One job with its attempt history, or 404. */
export async function getJob(db: Kysely<Database>, jobId: string): Promise<JobSnapshot> {
  const id = checkJobId(jobId);
  const row = await db
    .selectFrom("jobs")
    .selectAll()
    .select(attemptHistory("jobs").as("attempt_history"))
    .where("id", "=", id)
    .executeTakeFirst();
  if (!row) throw new ConnectError(`job ${id} not found`, Code.NotFound);
  const { attempt_history, ...job } = row;
  return jobSnapshot(job, attempt_history);
}

/** A job row, or not_found naming it. */
export async function findJob(db: Kysely<Database>, jobId: string): Promise<JobRow> {
  const row = await db.selectFrom("jobs").selectAll().where("id", "=", jobId).executeTakeFirst();
  if (!row) throw new ConnectError(`job ${jobId} not found`, Code.NotFound);
  return row;
}
