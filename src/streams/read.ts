import { Code, ConnectError } from "@connectrpc/connect";
import type { JsonValue } from "@bufbuild/protobuf";
import { sql, type Kysely } from "kysely";
import { checkJobId } from "../broker/ids.js";
import type { Database, JobState, StreamName } from "../store/schema.js";

/** Bounds of one page of a read. */
const readLimits = { defaultPageSize: 1000, maxPageSize: 10_000 } as const;

/** Which entries of a job's stream to read. */
export interface StreamQuery {
  readonly jobId: string;
  readonly stream: StreamName;
  /** Only entries after this position (from an entry's `position`); empty for the start. */
  readonly after: string;
  /** Only this attempt; 0 for every attempt. */
  readonly attempt: number;
  /** Only entries with at least this sequence; 0 for all. */
  readonly fromSequence: number;
  /** Most entries in one page; 0 for the default. */
  readonly pageSize: number;
}

/** One stored message, as readers see it. */
export interface StreamEntry {
  readonly sequence: number;
  readonly attempt: number;
  readonly data: JsonValue;
  /** Opaque, ordered across the job's leases: "<lease id>.<sequence>". */
  readonly position: string;
  readonly leaseId: number;
  readonly receivedAt: Date;
}

/** A query with its bounds checked and its position parsed. */
export interface CheckedQuery extends StreamQuery {
  readonly afterLease: number;
  readonly afterSequence: number;
  readonly limit: number;
}

const positionPattern = /^(\d{1,16})\.(\d{1,16})$/;

/** Checks a query's fields; throws invalid_argument naming the first bad one. */
export function checkQuery(q: StreamQuery): CheckedQuery {
  const jobId = checkJobId(q.jobId);
  const bad = (text: string) => new ConnectError(text, Code.InvalidArgument);
  let afterLease = 0;
  let afterSequence = 0;
  if (q.after) {
    const m = positionPattern.exec(q.after);
    if (!m)
      throw bad(
        `after ${JSON.stringify(q.after.slice(0, 40))} is not a position; pass the position of an entry read before`,
      );
    afterLease = Number(m[1]);
    afterSequence = Number(m[2]);
  }
  if (!Number.isSafeInteger(q.attempt) || q.attempt < 0)
    throw bad(`attempt must be 0 (every attempt) or an attempt number; got ${q.attempt}`);
  if (!Number.isSafeInteger(q.fromSequence) || q.fromSequence < 0)
    throw bad(`fromSequence must be a non-negative integer; got ${q.fromSequence}`);
  if (!Number.isInteger(q.pageSize) || q.pageSize < 0 || q.pageSize > readLimits.maxPageSize)
    throw bad(
      `pageSize must be 1 to ${readLimits.maxPageSize} (0 means ${readLimits.defaultPageSize}); got ${q.pageSize}`,
    );
  return {
    ...q,
    jobId,
    afterLease,
    afterSequence,
    limit: q.pageSize || readLimits.defaultPageSize,
  };
}

/** The state of a job, or 404 naming it. */
export async function jobState(db: Kysely<Database>, jobId: string): Promise<JobState> {
  const row = await db
    .selectFrom("jobs")
    .select("state")
    .where("id", "=", jobId)
    .executeTakeFirst();
  if (!row) throw new ConnectError(`job ${jobId} not found`, Code.NotFound);
  return row.state;
}

/** Settled jobs take no more messages: their streams are complete. */
export function isSettled(state: JobState): boolean {
  return state === "succeeded" || state === "failed" || state === "cancelled";
}

/**
 * One page of a job's stream, in order: by lease (lease ids grow with each
 * claim, so attempts come in order) and then by sequence. Served by the
 * primary key (job_id, stream, lease_id, sequence) from the position on.
 */
export async function readPage(
  db: Kysely<Database>,
  q: CheckedQuery,
  after = { lease: q.afterLease, sequence: q.afterSequence },
): Promise<StreamEntry[]> {
  const rows = await db
    .selectFrom("stream_messages")
    .select(["lease_id", "attempt", "sequence", "data", "received_at"])
    .where("job_id", "=", q.jobId)
    .where("stream", "=", q.stream)
    .where(sql<boolean>`(lease_id, sequence) > (${after.lease}::bigint, ${after.sequence}::bigint)`)
    .$if(q.attempt > 0, (b) => b.where("attempt", "=", q.attempt))
    .$if(q.fromSequence > 0, (b) => b.where("sequence", ">=", q.fromSequence))
    .orderBy("lease_id")
    .orderBy("sequence")
    .limit(q.limit)
    .execute();
  return rows.map((r) => ({
    sequence: r.sequence,
    attempt: r.attempt,
    data: r.data as JsonValue,
    position: `${r.lease_id}.${r.sequence}`,
    leaseId: r.lease_id,
    receivedAt: r.received_at,
  }));
}
