import { sql, type Kysely } from "kysely";
import type { LeaseHolder } from "../broker/lease-check.js";
import { liveLease } from "../broker/lease-sql.js";
import type { Database, StreamName } from "../store/schema.js";
import { batchItems } from "./batch-items.js";
import { foldPeaks } from "./samples.js";
import { foldProgress } from "./progress.js";

/** Consecutive messages of one request on one lease, strictly increasing. */
export interface AppendBatch {
  readonly holder: LeaseHolder;
  readonly stream: StreamName;
  readonly jobId: string;
  readonly tokenHash: Buffer;
  /** Sequence of the first and last message. */
  readonly first: number;
  readonly last: number;
  /** [[sequence, data], ...] as JSON text. */
  readonly itemsJson: string;
}

/** What became of a batch: all stored, or none (the lease is not live, or its first sequence is not above the last accepted). */
export type AppendOutcome = "stored" | "lease_not_live" | "sequence_not_increasing";

/**
 * Stores a batch in one statement, all or nothing, guarded by the rules:
 *
 * - the lease is live now (`now()` of this statement) and the caller's; the
 *   job row is locked FOR SHARE, so a completion, release or expiry waits
 *   for this statement to commit: nothing is ever stored under a lease after
 *   it ended, and a follower that saw the job settle has seen every message;
 * - the first sequence is above the lease's last accepted one. The cursor
 *   row is upserted with ON CONFLICT DO UPDATE, which locks it: a second
 *   request on the same lease and stream waits here and then checks against
 *   the sequence this one stored. The batch increases strictly (the caller
 *   checks), so its first sequence decides for all of it.
 *
 * Resource samples in an events batch also raise the job's row in
 * job_peaks, and its last job.progress event becomes the job's progress
 * (progress.ts, foldProgress), in the same statement.
 *
 * One statement per batch rather than per message: a request's buffered
 * lines share one round trip and one commit (fsync). The batch's JSON is
 * one parameter, parsed once (`batch_items`), whatever reads it: each
 * parameter is converted when the statement is bound, used or not, and a
 * logs batch sent three times (once for each part) cost Postgres 2-3× the
 * CPU a line (docs/performance.md, section 3). The events-only parts are
 * left out of a logs batch's statement. Followers are woken
 * separately (see notifier.ts): a NOTIFY here would serialize the commits.
 */
export async function appendBatch(db: Kysely<Database>, b: AppendBatch): Promise<AppendOutcome> {
  const { rows } = await sql<{ live: number; stored: number }>`
    with lease as (
      select l.id, l.attempt from jobs j join leases l on l.id = j.lease_id
      where ${liveLease({ jobId: b.jobId, workspaceId: b.holder.workspaceId, runnerId: b.holder.runnerId, token: b.tokenHash }, "j")}
      for share of j
    ), cursor as (
      insert into stream_cursors (lease_id, stream, last_sequence)
      select id, ${b.stream}::text, ${b.last}::bigint from lease
      on conflict (lease_id, stream) do update set last_sequence = excluded.last_sequence
        where stream_cursors.last_sequence < ${b.first}::bigint
      returning lease_id
    ), ${batchItems} as (
      select (m.value ->> 0)::bigint as sequence, m.value -> 1 as data, m.n
      from jsonb_array_elements(${b.itemsJson}::jsonb) with ordinality m(value, n)
    ), stored as (
      insert into stream_messages (job_id, stream, lease_id, attempt, sequence, data)
      select ${b.jobId}::uuid, ${b.stream}::text, lease.id, lease.attempt, items.sequence, items.data
      from cursor, lease, ${batchItems} items
    )${b.stream === "events" ? sql`, peaks as (${foldPeaks(b.jobId)}), progress as (${foldProgress(b.jobId)})` : sql``}
    select (select count(*) from lease)::int as live, (select count(*) from cursor)::int as stored`.execute(db);
  const row = rows[0]!;
  if (row.live === 0) return "lease_not_live";
  return row.stored === 1 ? "stored" : "sequence_not_increasing";
}

/**
 * The last accepted sequence to report when a message is rejected: that of
 * the lease the message names when it is the caller's lease on that job
 * (live or ended), else 0. Not the caller's other lease on the job: a client
 * following the resume rule drops every message up to the number reported,
 * so a number from another lease would have it drop a refused message as
 * stored. Another runner's progress is never revealed. Only rejections pay
 * for this query.
 */
export async function lastAcceptedSequence(db: Kysely<Database>, holder: LeaseHolder, stream: StreamName, jobId: string, tokenHash: Buffer): Promise<number> {
  const { rows } = await sql<{ last: number }>`
    select coalesce(c.last_sequence, 0)::bigint as last
    from leases l left join stream_cursors c on c.lease_id = l.id and c.stream = ${stream}
    where l.token_sha256 = ${tokenHash} and l.job_id = ${jobId} and l.workspace_id = ${holder.workspaceId} and l.runner_id = ${holder.runnerId}`.execute(db);
  return rows[0]?.last ?? 0;
}
