import { Code, ConnectError } from "@connectrpc/connect";
import { sql, type Kysely } from "kysely";
import type { Database } from "../../store/schema.js";
import { checkJobId } from "../ids.js";
import { findJob, jobSnapshot, type JobRow, type JobSnapshot } from "./snapshot.js";
import { eventsCte } from "../../events/record.js";
import { settleWith, type SettleHook } from "../pipelines/settle-hook.js";
import { noticeNotify } from "../leases/notices.js";

/**
 * Cancels a job. Queued or waiting for input: settled as cancelled at once. Running: flagged, and
 * its runner's watch is woken in the same transaction (notices.ts), so a watching runner learns it
 * at once, any other on its next renew; if it never settles the job, the lease's expiry settles it
 * as cancelled. Cancelling a cancelled job returns
 * it; a succeeded or failed job cannot be cancelled (409).
 */
export async function cancelJob(
  db: Kysely<Database>,
  jobId: string,
  by: string,
  hook?: SettleHook,
): Promise<JobSnapshot> {
  const id = checkJobId(jobId);
  // The events: job.cancel_requested the first time, then job.settled for a queued job settled at
  // once (read from the first insert's rows, so it comes after it; a queued job never has
  // cancel_requested set).
  const rows = await settleWith(
    db,
    hook,
    async (q) =>
      (
        await sql<JobRow>`
    with old as (
      select id, state, cancel_requested from jobs where id = ${id} and state in ('queued',
        'running', 'waiting_input') for update
    ), j as (
      update jobs set
        state = case when jobs.state in ('queued', 'waiting_input') then 'cancelled' else jobs.state end,
        settled_at = case when jobs.state in ('queued', 'waiting_input') then now() else settled_at end,
        failure_reason = case when jobs.state in ('queued', 'waiting_input') then 'cancelled' else failure_reason end,
        failure_message = case when jobs.state = 'queued'
          then ${`cancelled by ${by} before it was claimed`} when jobs.state = 'waiting_input'
          then ${`cancelled by ${by} while it waited for input`} else failure_message end,
        cancel_requested = true,
        cancelled_by = coalesce(jobs.cancelled_by, ${by}),
        updated_at = now()
      from old where jobs.id = old.id
      returning jobs.*, old.state as was_state, old.cancel_requested as was_requested
    ), ${eventsCte(
      "requested",
      "j",
      {
        type: sql`'job.cancel_requested'`,
        workspaceId: sql`j.workspace_id`,
        jobId: sql`j.id`,
        data: sql`jsonb_build_object('state',
      j.was_state, 'by', j.cancelled_by)`,
      },
      sql`not j.was_requested`,
    )},
    ${eventsCte(
      "settled",
      sql`requested join j on j.id =
      requested.job_id`,
      {
        type: sql`'job.settled'`,
        workspaceId: sql`j.workspace_id`,
        jobId: sql`j.id`,
        data: sql`jsonb_build_object('outcome',
      'cancelled', 'errorCode', 'cancelled', 'attempt', j.attempts)`,
      },
      sql`j.was_state in
      ('queued', 'waiting_input')`,
    )}, notified as (
      select ${noticeNotify("j")} from j where j.was_state = 'running' and j.runner_id is not null
    )
    select j.*, (select count(*) from notified) as notified from j`.execute(q)
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
