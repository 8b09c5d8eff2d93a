import { sql, type Kysely } from "kysely";
import type { LeaseHolder } from "../broker/leases/check.js";
import { createBatcher, type BatcherOptions } from "../broker/leases/batcher.js";
import { liveLease } from "../broker/leases/sql-fragments.js";
import { runnerSeenStale } from "../broker/fleet/seen.js";
import type { Database, StreamName } from "../store/schema.js";
import { storedItems } from "./stored-items.js";
import { foldPeaks } from "./samples.js";
import { foldProgress } from "./progress.js";

/** Consecutive messages of one request on one lease, strictly increasing. */
export interface AppendBatch {
  readonly holder: LeaseHolder;
  readonly stream: StreamName;
  readonly jobId: string;
  readonly tokenHash: Buffer;
  /**
   * The messages' sequences, strictly increasing (the caller checks), and their data as JSON text:
   * one of each a message.
   */
  readonly sequences: readonly number[];
  readonly data: readonly string[];
}

/**
 * What became of a batch: all stored, or none (the lease is not live, or its first sequence is not
 * above the last accepted).
 */
export type AppendOutcome = "stored" | "lease_not_live" | "sequence_not_increasing";

/**
 * Stores a batch in one statement, all or nothing (appendBatches of one).
 */
async function appendBatch(db: Kysely<Database>, b: AppendBatch): Promise<AppendOutcome> {
  const [outcome] = await appendBatches(db, [b]);
  return outcome!;
}

/**
 * Stores batches of different leases or streams (no two of one job and
 * stream) in one statement and one commit; each all or nothing on its own,
 * guarded by the rules:
 *
 * - the lease is live now (`now()` of this statement) and the caller's; the
 *   job row is locked FOR SHARE, so a completion, release or expiry waits
 *   for this statement to commit: nothing is ever stored under a lease after
 *   it ended, and a follower that saw the job settle has seen every message;
 * - the first sequence is above the lease's last accepted one. The cursor
 *   row is upserted with ON CONFLICT DO UPDATE, which locks it: a second
 *   request on the same lease and stream waits here and then checks against
 *   the sequence this one stored. A batch increases strictly (the caller
 *   checks), so its first sequence decides for all of it.
 *
 * Job rows are locked in job id order and cursor rows in lease id order, so
 * two such statements never wait for each other in a cycle.
 *
 * Resource samples in an events batch also raise the job's row in
 * job_peaks, and its last job.progress event becomes the job's progress
 * (progress.ts, foldProgress), in the same statement; a statement of logs
 * batches only leaves those parts out.
 *
 * One statement per batch rather than per message: a request's buffered
 * lines share one round trip and one commit (fsync); and the batches that
 * requests on many leases have ready at once share one statement
 * (createAppender). The batches' data is one parameter, parsed once, read by
 * every part (`stored_items`): each parameter is converted when the
 * statement is bound, used or not, and a batch sent once a part cost
 * Postgres 2-3× the CPU a line (docs/performance.md, section 3). Followers
 * are woken separately (see notifier.ts): a NOTIFY here would serialize the
 * commits.
 */
export async function appendBatches(
  db: Kysely<Database>,
  batches: readonly AppendBatch[],
): Promise<AppendOutcome[]> {
  const column = <T>(f: (b: AppendBatch) => T): T[] => batches.map(f);
  // The messages of every batch in two flat parameters, their sequences and their data, each batch
  // reading its own range of them (item_from .. item_to): Postgres spent ~30 % less CPU a line than
  // on one jsonb parameter of [[sequence, data], ...] pairs a batch (bench/micro/pg-line-cost.ts;
  // docs/performance.md, section 3). A range a batch, not a join of every item to its batch: the
  // planner cannot see how many batches are stored, and joined items to them once a batch.
  const ranges: Array<readonly [number, number]> = [];
  let itemCount = 0;
  for (const b of batches) ranges.push([itemCount + 1, (itemCount += b.sequences.length)]);
  const items = {
    sequence: `{${column((b) => b.sequences.join(",")).join(",")}}`,
    data: `[${column((b) => b.data.join(",")).join(",")}]`,
  };
  const match = {
    jobId: sql.ref<string>("i.job_id"),
    workspaceId: sql.ref<string>("i.workspace_id"),
    runnerId: sql.ref<string>("i.runner_id"),
    token: sql.ref<Buffer>("i.token"),
  };
  const { rows } = await sql<{ live: boolean; stored: boolean }>`
    with input as (
      select i.b, i.job_id, i.stream, i.workspace_id, i.runner_id, decode(i.token_hex, 'hex') as
        token, i.first, i.last, i.item_from, i.item_to
      from unnest(
        ${column((b) => b.jobId)}::uuid[],
        ${column((b) => b.stream)}::text[],
        ${column((b) => b.holder.workspaceId)}::text[],
        ${column((b) => b.holder.runnerId)}::text[],
        ${column((b) => b.tokenHash.toString("hex"))}::text[],
        ${column((b) => b.sequences[0]!)}::bigint[],
        ${column((b) => b.sequences[b.sequences.length - 1]!)}::bigint[],
        ${ranges.map((r) => r[0])}::int[],
        ${ranges.map((r) => r[1])}::int[])
        with ordinality i(job_id, stream, workspace_id, runner_id, token_hex, first, last, item_from, item_to, b)
    ), lease as (
      select i.b, i.stream, i.first, i.last, i.item_from, i.item_to, l.id, l.attempt, j.id as job_id
      from input i join jobs j on ${liveLease(match, "j")} join leases l on l.id = j.lease_id
      order by j.id, i.stream
      for share of j
    ), cursor as (
      insert into stream_cursors (lease_id, stream, last_sequence)
      select id, stream, last from lease order by id, stream
      on conflict (lease_id, stream) do update set last_sequence = excluded.last_sequence
        where stream_cursors.last_sequence < (select x.first from lease x where x.id =
          excluded.lease_id and x.stream = excluded.stream)
      returning lease_id, stream
    ), ${storedItems} as (
      select lease.job_id, lease.stream, lease.id as lease_id, lease.attempt,
        (${items.sequence}::bigint[])[m.n] as sequence, ${items.data}::jsonb -> (m.n - 1) as data, m.n
      from cursor join lease on lease.id = cursor.lease_id and lease.stream = cursor.stream
        cross join lateral generate_series(lease.item_from, lease.item_to) m(n)
    ), stored as (
      insert into stream_messages (job_id, stream, lease_id, attempt, sequence, data)
      select job_id, stream, lease_id, attempt, sequence, data from ${storedItems}
    ), writer as (
      select distinct i.workspace_id, i.runner_id from input i join lease on lease.b = i.b
    ), seen as (
      -- A write under a live lease is contact: at most once a second a runner, as renewals. SKIP
      -- LOCKED, in key order: statements shared by many runners never wait on (or deadlock over)
      -- a row another is moving to now() anyway.
      update runners set last_seen_at = now() where (workspace_id, runner_id) in (
        select runners.workspace_id, runners.runner_id from runners join writer on
          ${runnerSeenStale(sql.ref("writer.workspace_id"), sql.ref("writer.runner_id"))}
        order by runners.workspace_id, runners.runner_id
        for update of runners skip locked)
    )${
      batches.some((b) => b.stream === "events")
        ? sql`, peaks as (${foldPeaks()}), progress as
      (${foldProgress()})`
        : sql``
    }
    select exists (select 1 from lease where lease.b = i.b) as live,
      exists (select 1 from cursor join lease on lease.id = cursor.lease_id and lease.stream =
        cursor.stream where lease.b = i.b) as stored
    from input i order by i.b`.execute(db);
  return rows.map((row) =>
    !row.live ? "lease_not_live" : row.stored ? "stored" : "sequence_not_increasing",
  );
}

/**
 * Stores one batch (see appendBatches), in a statement shared with the batches other requests have
 * ready at the same time.
 */
export type Appender = (batch: AppendBatch) => Promise<AppendOutcome>;

/**
 * Two statements at a time per replica, each carrying the batches of up to
 * 32 requests. On this 2-core machine Postgres spent 5 µs of CPU a stored
 * line with one inserting statement at a time, 10 with two and 19-22 with
 * 50 (docs/performance.md, section 3); one at a time left the machine
 * waiting on commits, three were no faster than two. The batches that wait
 * meanwhile share the next statement and its commit.
 */
export const defaultAppendBatching: BatcherOptions = { maxBatch: 32, maxInFlight: 2 };

/**
 * An Appender over `db`. The batches of a turn are stored by one statement
 * (appendBatches), a second batch of a job and stream (two requests on one
 * lease and stream) by the next; when a statement of many fails (a
 * deadlock, say), it stored nothing, and each of its batches is stored
 * alone, so one batch's failure is never another's.
 */
export function createAppender(
  db: Kysely<Database>,
  batching: BatcherOptions = defaultAppendBatching,
): Appender {
  return createBatcher((batches: readonly AppendBatch[]) => appendTogether(db, batches), batching);
}

async function appendTogether(
  db: Kysely<Database>,
  batches: readonly AppendBatch[],
): Promise<Array<PromiseSettledResult<AppendOutcome>>> {
  const results: Array<PromiseSettledResult<AppendOutcome>> = [];
  const rounds: Array<Array<{ readonly batch: AppendBatch; readonly index: number }>> = [];
  // job and stream → the last round holding one of its batches
  const roundOf = new Map<string, number>();
  batches.forEach((batch, index) => {
    const key = `${batch.jobId} ${batch.stream}`;
    const round = (roundOf.get(key) ?? -1) + 1;
    roundOf.set(key, round);
    (rounds[round] ??= []).push({ batch, index });
  });
  for (const round of rounds) {
    try {
      const outcomes = await appendBatches(
        db,
        round.map((r) => r.batch),
      );
      round.forEach((r, i) => (results[r.index] = { status: "fulfilled", value: outcomes[i]! }));
    } catch (reason) {
      const alone =
        round.length === 1
          ? [{ status: "rejected" as const, reason }]
          : await Promise.allSettled(round.map((r) => appendBatch(db, r.batch)));
      round.forEach((r, i) => (results[r.index] = alone[i]!));
    }
  }
  return results;
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
export async function lastAcceptedSequence(
  db: Kysely<Database>,
  holder: LeaseHolder,
  stream: StreamName,
  jobId: string,
  tokenHash: Buffer,
): Promise<number> {
  const { rows } = await sql<{ last: number }>`
    select coalesce(c.last_sequence, 0)::bigint as last
    from leases l left join stream_cursors c on c.lease_id = l.id and c.stream = ${stream}
    where l.token_sha256 = ${tokenHash} and l.job_id = ${jobId} and l.workspace_id
      = ${holder.workspaceId} and l.runner_id = ${holder.runnerId}`.execute(db);
  return rows[0]?.last ?? 0;
}
