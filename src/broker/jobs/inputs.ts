import { Code, ConnectError } from "@connectrpc/connect";
import type { Kysely, Selectable } from "kysely";
import type { Database, JobInputsTable } from "../../store/schema.js";
import { definedOnly } from "../../protocol/defined-only.js";
import type { JobSnapshot } from "./snapshot.js";
import { requireLiveLease, type LeaseHolder } from "../leases/check.js";

// The views of a job's input request (docs/suspend.md): on the job, and in
// the lease that resumes it. The rules that change it are in sql/suspend.ts,
// sql/answer.ts and sql/expire.ts.

/** A job_inputs row as read. */
export type JobInputRow = Selectable<JobInputsTable>;

/** What a lease carries to a resumed job: the answered request and the checkpoint files. */
export interface LeaseInput {
  readonly requestId: string;
  readonly answer: unknown;
  readonly checkpoint: ReadonlyArray<Record<string, unknown>>;
}

/** The job's latest input request row (jobs.input_lease_id), if any. */
export async function latestInput(
  db: Kysely<Database>,
  jobId: string,
): Promise<JobInputRow | undefined> {
  return db
    .selectFrom("job_inputs")
    .selectAll("job_inputs")
    .innerJoin("jobs", "jobs.input_lease_id", "job_inputs.lease_id")
    .where("jobs.id", "=", jobId)
    .executeTakeFirst();
}

/** The snapshot's proto3 JSON fields of an input row: inputRequest and checkpoint. */
function inputFields(row: JobInputRow): JobSnapshot {
  return definedOnly({
    inputRequest: definedOnly({
      id: row.request_id,
      prompt: row.prompt,
      schema: row.schema,
      expiresAt: row.expires_at.toISOString(),
      answeredAt: row.answered_at?.toISOString(),
    }),
    checkpoint: row.checkpoint.length ? row.checkpoint : undefined,
  });
}

/** The snapshot with its job's latest input request, when it has one. */
export async function withInput(db: Kysely<Database>, snapshot: JobSnapshot): Promise<JobSnapshot> {
  const row = await latestInput(db, String(snapshot.id));
  return row ? { ...snapshot, ...inputFields(row) } : snapshot;
}

/**
 * For each input lease id of leased jobs: the answered request a lease delivers (unanswered ones
 * deliver nothing).
 */
export async function leaseInputs(
  db: Kysely<Database>,
  inputLeaseIds: readonly number[],
): Promise<Map<number, LeaseInput>> {
  if (inputLeaseIds.length === 0) return new Map();
  const rows = await db
    .selectFrom("job_inputs")
    .selectAll()
    .where("lease_id", "in", inputLeaseIds)
    .where("answered_at", "is not", null)
    .execute();
  return new Map(
    rows.map((r) => [
      Number(r.lease_id),
      { requestId: r.request_id, answer: r.answer, checkpoint: r.checkpoint },
    ]),
  );
}

/**
 * One checkpoint file of the job under the caller's live lease: an entry of
 * its latest input request's checkpoint (404 naming the ones it has), or the
 * lease's refusal.
 */
export async function leaseCheckpointFile(
  db: Kysely<Database>,
  holder: LeaseHolder,
  jobId: string,
  leaseToken: string,
  name: string,
): Promise<CheckpointEntry> {
  const lease = await requireLiveLease(db, holder, jobId, leaseToken);
  const row = await latestInput(db, lease.job.id);
  const entry = row?.checkpoint.find((a) => a.name === name);
  if (!entry) {
    const names = (row?.checkpoint ?? []).map((a) => JSON.stringify(a.name));
    throw new ConnectError(
      `job ${lease.job.id} has no checkpoint file named ` +
        `${JSON.stringify(name.slice(0, 200))}; ` +
        `${names.length ? `its checkpoint has ${names.join(", ")}` : "it has no checkpoint"}`,
      Code.NotFound,
    );
  }
  return {
    name: String(entry.name),
    digest: String(entry.digest),
    size: Number(entry.size),
    mediaType: String(entry.mediaType),
  };
}

/** A checkpoint file as stored: a manifest entry. */
export interface CheckpointEntry {
  readonly name: string;
  readonly digest: string;
  readonly size: number;
  readonly mediaType: string;
}
