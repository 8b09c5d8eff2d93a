import { sql, type RawBuilder } from "kysely";
import { maxProgressCount } from "../protocol/job-directives.js";
import { progressEventType } from "../protocol/job-events.js";
import { storedItems } from "./stored-items.js";

/**
 * The part of the statement storing batches (append.ts) that keeps a job's
 * last progress (docs/job-contract.md): the last job.progress event of a
 * stored events batch (`stored_items`; one a job at most) becomes
 * jobs.progress with the time it was stored. Only the
 * figures the contract defines are kept, and only as JSON numbers in range: events
 * are the runner's JSON, and anything else in one is not the job view's.
 * The job row is already locked by the batch's lease check (FOR SHARE), so
 * this update takes no lock the statement did not hold. The runner sends
 * at most one progress event a second per job, so this write is rare.
 */
export function foldProgress(): RawBuilder<unknown> {
  const data = sql`m.data`;
  // A figure out of its range (a runner's own event may carry anything) is left out, so the job
  // view never holds what its JobProgress message cannot (int32 counts, a percent of 0-100).
  const figure = (name: string, max: number, whole: boolean) => sql`case
    when jsonb_typeof(${data}->${name}) = 'number' and (${data}->>${name})::numeric between 0 and ${max}::numeric
      ${whole ? sql`and (${data}->>${name})::numeric = trunc((${data}->>${name})::numeric)` : sql``}
    then jsonb_build_object(${name}::text, ${data}->${name}) else '{}'::jsonb end`;
  return sql`
    update jobs set progress = p.progress
    from (
      select distinct on (m.job_id) m.job_id,
        ${figure("percent", 100, false)} || ${figure("done", maxProgressCount, true)} ||
          ${figure("total", maxProgressCount, true)} ||
          jsonb_build_object('updatedAt', to_char(now() at time zone 'utc',
          'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')) as progress
      from ${storedItems} m
      where m.stream = 'events' and ${data}->>'type' = ${progressEventType}
      order by m.job_id, m.n desc
    ) p
    where jobs.id = p.job_id`;
}
