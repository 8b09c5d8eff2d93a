import { Code, ConnectError } from "@connectrpc/connect";
import type { Kysely } from "kysely";
import type { Database } from "../../store/schema.js";
import { jobSecretBinding } from "../../secrets/bindings.js";
import type { SecretBox } from "../../secrets/box.js";
import { enqueueJob } from "./enqueue.js";
import { findJob } from "./snapshot.js";
import { type JobSpecInput, type JobTimeouts } from "./rules.js";
import { checkJobId } from "../ids.js";
import type { JobSnapshot } from "./snapshot.js";
import type { CodeHooks } from "../leases/pinning.js";

/** Why `job` cannot be retried now (it has not settled, or was retried already), or undefined. */
function retryRefusalOf(job: {
  readonly id: string;
  readonly state: string;
  readonly retried_by: string | null;
}): ConnectError | undefined {
  if (job.state === "queued" || job.state === "running")
    return new ConnectError(
      `job ${job.id} is still ${job.state}; retry it once it settled (or cancel it first)`,
      Code.FailedPrecondition,
    );
  if (job.retried_by)
    return new ConnectError(
      `job ${job.id} was already retried by job ${job.retried_by}; retry that one to run it again`,
      Code.Aborted,
    );
  return undefined;
}

/** Whether a job can be retried now, and who enqueued it (for the enqueuer's right to retry). */
export async function retryCheck(
  db: Kysely<Database>,
  jobId: string,
): Promise<{ readonly enqueuedBy: string; readonly refusal: string | undefined }> {
  const job = await findJob(db, checkJobId(jobId));
  return { enqueuedBy: job.enqueued_by ?? "", refusal: retryRefusalOf(job)?.rawMessage };
}

/**
 * Enqueues a new job with a settled job's labels, code, spec, limits and
 * secrets, through the one enqueue path, and links the two (retry_of on the
 * new job, retried_by on the old one) in one transaction. The secrets are
 * copied server-side, opened from the old job's sealed rows and sealed again
 * for the new one, and never returned; a job whose secrets were already
 * erased (they are, when it settled) is refused, naming them. A job is
 * retried once: retrying it again returns 409 naming its retry.
 */
export async function retryJob(
  db: Kysely<Database>,
  jobId: string,
  by: string,
  timeouts: JobTimeouts,
  code?: CodeHooks,
  box?: SecretBox,
): Promise<JobSnapshot> {
  const id = checkJobId(jobId);
  const old = await findJob(db, id);
  const refusal = retryRefusalOf(old);
  if (refusal) throw refusal;
  if (old.repository) await code?.checkTarget(old.repository, old.target_branch ?? "");
  return db.transaction().execute(async (tx) => {
    const locked = await tx
      .selectFrom("jobs")
      .select(["retried_by"])
      .where("id", "=", id)
      .forUpdate()
      .executeTakeFirstOrThrow();
    if (locked.retried_by)
      throw new ConnectError(
        `job ${id} was already retried by job ${locked.retried_by}; retry that one to run it again`,
        Code.Aborted,
      );
    const sealed = await tx
      .selectFrom("job_secrets")
      .selectAll()
      .where("job_id", "=", id)
      .execute();
    const names = [
      ...old.secret_names.map((n) => `secrets.${n}`),
      ...old.secret_file_names.map((n) => `secretFiles.${n}`),
    ];
    if (names.length && sealed.length < names.length) {
      throw new ConnectError(
        `job ${id} had secrets (${names.join(", ")}) that were erased when it ` +
          `settled; enqueue it again with its secrets`,
        Code.FailedPrecondition,
      );
    }
    const secrets: Record<string, string> = {};
    const secretFiles: Record<string, string> = {};
    for (const r of sealed)
      (r.kind === "env" ? secrets : secretFiles)[r.name] = box!.open(
        r.sealed,
        jobSecretBinding(r.job_id, r.kind, r.name),
      );
    const spec = old.spec as Record<string, unknown>;
    const jobSpec: JobSpecInput = {
      image: String(spec.image ?? ""),
      argv: (spec.argv as string[] | undefined) ?? [],
      env: (spec.env as Record<string, string> | undefined) ?? {},
      timeoutSeconds: Number(spec.timeoutSeconds ?? 0),
      cpu: Number(spec.cpu ?? 0),
      memoryBytes: Number(spec.memoryBytes ?? 0),
    };
    // The code host was asked above, outside the transaction.
    const checked: CodeHooks | undefined = code && { ...code, checkTarget: async () => undefined };
    const job = await enqueueJob(
      tx,
      {
        workspaceId: old.workspace_id,
        labels: old.labels,
        repository: old.repository ?? "",
        targetBranch: old.target_branch ?? "",
        spec: jobSpec,
        maxAttempts: old.max_attempts,
        priority: old.priority,
        idempotencyKey: "",
        kind: old.kind,
        enqueuedBy: by,
        secrets,
        secretFiles,
        displayName: old.display_name ?? undefined,
      },
      timeouts,
      checked,
      box,
    );
    const newId = String(job.id);
    await tx.updateTable("jobs").set({ retry_of: id }).where("id", "=", newId).execute();
    await tx.updateTable("jobs").set({ retried_by: newId }).where("id", "=", id).execute();
    return { ...job, retryOf: id };
  });
}
