import { sql } from "kysely";
import type { EventColumns, RequeueReason } from "../../events/record.js";

/**
 * The event of a statement that ended a lease, for each row of its CTE `j`
 * (the job as updated, with `lease_runner_id`, the runner that held it):
 * job.requeued with `why` when the job is queued again, job.settled with its
 * outcome and error code otherwise.
 */
export function settledOrRequeued(why: RequeueReason): EventColumns {
  return {
    type: sql<string>`case when j.state = 'queued' then 'job.requeued' else 'job.settled' end`,
    workspaceId: sql<string>`j.workspace_id`,
    runnerId: sql<string>`j.lease_runner_id`,
    jobId: sql<string>`j.id`,
    data: sql`case when j.state = 'queued' then jsonb_build_object('why', ${why}::text, 'attempt', j.attempts)
      else jsonb_strip_nulls(jsonb_build_object('outcome', j.state, 'errorCode',
        coalesce(j.failure_reason, j.error->>'code'), 'attempt', j.attempts)) end`,
  };
}
