import { createHash } from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import { sql, type Kysely } from "kysely";
import type { Database } from "../../store/schema.js";
import { eventsCte } from "../../events/record.js";
import {
  checkInputRequest,
  InputRuleError,
  suspendFeatures,
  type InputRequestSpec,
} from "../../protocol/input-request.js";
import { checkJobId, checkLeaseToken } from "../ids.js";
import { findJob } from "../jobs/snapshot.js";
import { jobSnapshot, type JobRow, type JobSnapshot } from "../jobs/snapshot.js";
import { withInput, type CheckpointEntry } from "../jobs/inputs.js";
import { leaseRefusal } from "./check.js";
import { liveLease } from "./sql-fragments.js";
import { givenBack, givenBackLeaseRow } from "./release.js";
import type { LeaseCall } from "./views.js";
import { declaredFeatures } from "../fleet/features.js";

/**
 * A suspend under a lease: the job's input request and the checkpoint files uploaded under the
 * lease (already checked as a manifest).
 */
export interface SuspendInput extends LeaseCall {
  readonly request: InputRequestSpec;
  readonly checkpoint: readonly CheckpointEntry[];
}

/**
 * Suspends a job under its live lease (docs/suspend.md): the job waits in
 * `waiting_input` for its input request to be answered, the lease ends
 * (reason `suspended`), and the attempt is not charged. Attempts are counted
 * at claim (forelead_claim sets attempts to the lease's attempt, one more
 * than before), so the suspend gives that one back, as a release does: the
 * count is what the limit (max_attempts) is checked against by the claim,
 * the expiry sweep and a retryable failure, and all three stay right with
 * no rule of their own about suspensions. The resuming lease then has the
 * same attempt number as the suspended one. A job whose cancel was
 * requested is settled as cancelled instead.
 *
 * Refused with failed_precondition for a runner that did not declare the
 * suspend features, and invalid_argument for a bad request (its schema must
 * compile). The same suspend repeated under the same lease gets the job as
 * it is now; a different one 409.
 */
export async function suspendJob(db: Kysely<Database>, input: SuspendInput): Promise<JobSnapshot> {
  const jobId = checkJobId(input.jobId);
  const tokenHash = checkLeaseToken(input.leaseToken);
  const declared = await declaredFeatures(db, input);
  const missing = suspendFeatures.filter((f) => !declared.includes(f));
  if (missing.length) {
    throw new ConnectError(
      `runner "${input.runnerId}" did not declare the feature(s) ` +
        `${missing.join(", ")} when it registered, so it cannot suspend jobs; ` +
        `register with them (docs/suspend.md) or complete the job`,
      Code.FailedPrecondition,
    );
  }
  try {
    checkInputRequest(input.request);
  } catch (err) {
    if (err instanceof InputRuleError) throw new ConnectError(err.message, Code.InvalidArgument);
    throw err;
  }
  const { request } = input;
  const checkpoint = input.checkpoint.map((a) => ({
    name: a.name,
    digest: a.digest,
    size: String(a.size),
    mediaType: a.mediaType,
  }));
  const sha = createHash("sha256")
    .update(
      JSON.stringify([
        request.id,
        request.prompt,
        request.schema,
        request.expiresInSeconds,
        checkpoint,
      ]),
    )
    .digest("hex");
  const { rows } = await sql<JobRow>`
    with held as (
      select id, lease_id from jobs
      where ${liveLease({ jobId, workspaceId: input.workspaceId, runnerId: input.runnerId, token: tokenHash })}
      for update
    ), j as (
      update jobs set
        ${givenBack("cancelled; the job suspended after its cancel was requested", "waiting_input")},
        input_lease_id = case when jobs.cancel_requested then jobs.input_lease_id else held.lease_id end
      from held where jobs.id = held.id
      returning jobs.*, held.lease_id as ended_lease_id, ${input.runnerId}::text as lease_runner_id
    ), l as (
      update leases set ${givenBackLeaseRow("suspended")}
      from j where leases.id = j.ended_lease_id
    ), ins as (
      insert into job_inputs (lease_id, job_id, request_id, prompt, schema, expires_at, checkpoint, suspend_sha256)
      select j.ended_lease_id, j.id, ${request.id}, ${request.prompt}, ${JSON.stringify(request.schema)}::jsonb,
        now() + make_interval(secs => ${request.expiresInSeconds}::int), ${JSON.stringify(checkpoint)}::jsonb, ${sha}
      from j
    ), ${eventsCte("ev", "j", {
      type: sql`case when j.state = 'waiting_input' then 'job.suspended' else 'job.settled' end`,
      workspaceId: sql`j.workspace_id`,
      runnerId: sql`j.lease_runner_id`,
      jobId: sql`j.id`,
      data: sql`case when j.state = 'waiting_input'
        then jsonb_build_object('requestId', ${request.id}::text, 'attempt', j.attempts,
          'checkpointFiles', ${checkpoint.length}::int, 'expiresInSeconds', ${request.expiresInSeconds}::int)
        else jsonb_build_object('outcome', 'cancelled', 'errorCode', 'cancelled', 'attempt', j.attempts) end`,
    })}
    select j.* from j`.execute(db);
  const row = rows[0];
  if (row) {
    const {
      ended_lease_id: _l,
      lease_runner_id: _r,
      ...job
    } = row as JobRow & { ended_lease_id: number; lease_runner_id: string };
    return withInput(db, jobSnapshot(job));
  }
  return repeatedSuspend(db, input, jobId, tokenHash, sha);
}

/**
 * A suspend that matched no live lease: a repeat of the one that ended it gets the job, anything
 * else its refusal.
 */
async function repeatedSuspend(
  db: Kysely<Database>,
  input: SuspendInput,
  jobId: string,
  tokenHash: Buffer,
  sha: string,
): Promise<JobSnapshot> {
  const earlier = await db
    .selectFrom("leases")
    .innerJoin("job_inputs", "job_inputs.lease_id", "leases.id")
    .select(["job_inputs.suspend_sha256", "job_inputs.request_id"])
    .where("leases.token_sha256", "=", tokenHash)
    .where("leases.job_id", "=", jobId)
    .where("leases.runner_id", "=", input.runnerId)
    .where("leases.workspace_id", "=", input.workspaceId)
    .executeTakeFirst();
  if (!earlier) throw await leaseRefusal(db, input, jobId, tokenHash);
  if (earlier.suspend_sha256 !== sha) {
    throw new ConnectError(
      `job ${jobId} was already suspended under this lease with input request ` +
        `${JSON.stringify(earlier.request_id)}; a different suspend is refused`,
      Code.Aborted,
    );
  }
  return withInput(db, jobSnapshot(await findJob(db, jobId)));
}
