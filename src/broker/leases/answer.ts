import { isDeepStrictEqual } from "node:util";
import { Code, ConnectError } from "@connectrpc/connect";
import { sql, type Kysely } from "kysely";
import type { Database } from "../../store/schema.js";
import { eventsCte } from "../../events/record.js";
import { checkAnswer, InputRuleError } from "../../protocol/input-request.js";
import { checkJobId } from "../ids.js";
import { findJob } from "../jobs/snapshot.js";
import { jobSnapshot, type JobRow, type JobSnapshot } from "../jobs/snapshot.js";
import { latestInput, withInput } from "../jobs/inputs.js";
import { wakeWaiters, woken } from "./sql-fragments.js";

/** An answer to a job's input request. */
export interface AnswerInput {
  readonly jobId: string;
  readonly requestId: string;
  readonly answer: unknown;
  /** The SPIFFE ID answering, kept with the answer. */
  readonly answeredBy: string;
}

/**
 * Answers the input request a job waits on (docs/suspend.md): the job is
 * queued again, and its next lease carries the answer and the checkpoint.
 * Refused with 409 naming the state when the job is not waiting for input,
 * or when `requestId` is not the request it waits on (or that request has
 * expired); with 400 naming the JSON path and rule when the answer does not
 * meet the request's schema. The same answer repeated after it was taken
 * gets the job as it is now.
 */
export async function answerInput(db: Kysely<Database>, input: AnswerInput): Promise<JobSnapshot> {
  const jobId = checkJobId(input.jobId);
  if (!input.requestId)
    throw new ConnectError(
      "requestId is required: the inputRequest.id the job view shows",
      Code.InvalidArgument,
    );
  const job = await findJob(db, jobId);
  const request = await latestInput(db, jobId);
  if (
    request &&
    request.request_id === input.requestId &&
    request.answered_at &&
    isDeepStrictEqual(request.answer, input.answer)
  )
    return withInput(db, jobSnapshot(job));
  if (job.state !== "waiting_input")
    throw new ConnectError(
      `job ${jobId} is ${job.state}, not waiting_input; there is no input request to answer`,
      Code.Aborted,
    );
  if (!request || request.request_id !== input.requestId) {
    throw new ConnectError(
      `job ${jobId} waits on input request ` +
        `${JSON.stringify(request?.request_id ?? "")}, not ` +
        `${JSON.stringify(input.requestId.slice(0, 80))}; answer the request its ` +
        `view shows`,
      Code.Aborted,
    );
  }
  try {
    checkAnswer(request.schema, input.answer);
  } catch (err) {
    if (err instanceof InputRuleError) throw new ConnectError(err.message, Code.InvalidArgument);
    throw err;
  }
  // One statement, guarded by the state and the unanswered, unexpired request. The job row is
  // locked first, as cancel and the expiry sweep lock it: a concurrent answer, cancel or expiry
  // either waits for this one or makes it match nothing, and the refusal below says what happened.
  const { rows } = await sql<JobRow>`
    with held as (
      select id from jobs where id = ${jobId} and state = 'waiting_input' and input_lease_id
        = ${request.lease_id} for update
    ), i as (
      update job_inputs set answer = ${JSON.stringify(input.answer)}::jsonb, answered_at = now(),
        answered_by = ${input.answeredBy}
      where lease_id = ${request.lease_id} and answered_at is null and expires_at > now() and exists
        (select 1 from held)
      returning job_id, request_id
    ), j as (
      update jobs set state = 'queued', updated_at = now() from i where jobs.id = i.job_id
      returning jobs.*, i.request_id as answered_request_id
    ), ${eventsCte("ev", "j", {
      type: sql`'job.input_answered'`,
      workspaceId: sql`j.workspace_id`,
      jobId: sql`j.id`,
      data: sql`jsonb_build_object('requestId',
      j.answered_request_id)`,
    })},
    ${wakeWaiters("j")}
    select j.*, ${woken} from j`.execute(db);
  const row = rows[0];
  if (row) {
    const {
      answered_request_id: _a,
      woken: _w,
      ...answered
    } = row as JobRow & { answered_request_id: string; woken: number };
    return withInput(db, jobSnapshot(answered));
  }
  const now = await findJob(db, jobId);
  if (now.state !== "waiting_input")
    throw new ConnectError(
      `job ${jobId} is ${now.state}, not waiting_input; there is no input request to answer`,
      Code.Aborted,
    );
  throw new ConnectError(
    `input request ${JSON.stringify(request.request_id)} of job ${jobId} ` +
      `expired at ${request.expires_at.toISOString()}; it can no longer be ` +
      `answered`,
    Code.Aborted,
  );
}
