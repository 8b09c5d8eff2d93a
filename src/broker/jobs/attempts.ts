import { sql, type RawBuilder } from "kysely";

/** A timestamptz as proto3 JSON (RFC 3339, UTC, microseconds); null stays null. */
function rfc3339(column: RawBuilder<unknown>): RawBuilder<string | null> {
  return sql`to_char(${column} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;
}

/**
 * What became of a lease, from leases.end_reason and the completion it stored: the JobAttempt
 * outcome. A completion that queued the job again is "retried"; a settled lease without a
 * completion (a pin that failed) takes the job's state.
 */
const outcome = sql<string>`case
  when l.ended_at is null then 'running'
  when l.end_reason = 'requeued' then 'retried'
  when l.end_reason = 'expired' then 'lease_lost'
  when l.end_reason in ('timed_out', 'released', 'suspended') then l.end_reason
  else coalesce(l.completion_reply->>'state', 'failed') end`;

/**
 * The attempt history of the jobs row `alias` (proto3 JSON of JobAttempt, oldest first): one entry
 * per lease, read from leases (by leases_job_stats' job_id) with the executor the runner named in
 * its job.started event (stream_messages' key) and the job's cancelled_by for a cancelled attempt.
 * Nothing is stored twice: the lease row is the attempt.
 */
export function attemptHistory(alias: "jobs" | "j"): RawBuilder<unknown[]> {
  const job = (column: string) => sql.ref(`${alias}.${column}`);
  return sql<unknown[]>`(select coalesce(jsonb_agg(a.entry order by a.attempt, a.id), '[]')
    from (select l.id, l.attempt, jsonb_strip_nulls(jsonb_build_object(
      'attempt', l.attempt,
      'runnerId', l.runner_id,
      'executor', (select s.data->>'executor' from stream_messages s where s.job_id = l.job_id
        and s.stream = 'events' and s.lease_id = l.id and s.data->>'type' = 'job.started'
        limit 1),
      'startedAt', ${rfc3339(sql`l.issued_at`)},
      'endedAt', ${rfc3339(sql`l.ended_at`)},
      'durationMs', floor(extract(epoch from coalesce(l.ended_at, now()) - l.issued_at)
        * 1000)::int8,
      'outcome', o.outcome,
      'exitCode', (l.completion_reply->>'exit_code')::int,
      'cancelledBy', case when o.outcome = 'cancelled' then ${job("cancelled_by")} end)) as entry
      from leases l cross join lateral (select ${outcome} as outcome) o
      where l.job_id = ${job("id")}) a)`;
}
