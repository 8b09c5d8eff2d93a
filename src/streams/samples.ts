import { sql, type Kysely } from "kysely";
import { checkJobId } from "../broker/ids.js";
import type { Database } from "../store/schema.js";
import { jobState } from "./read.js";

/**
 * The event type runners send a running job's CPU and memory as, on the
 * job's events stream: `{type, cpuCores, memoryBytes, at}` (docs/runner.md).
 */
export const resourceSampleType = "resource.sample";

/**
 * The one predicate of "this stream row is a usable resource sample": an
 * event of that type whose figures are JSON numbers (events are the
 * runner's free-form JSON; anything else is skipped, never cast and failed).
 */
export const isResourceSample = sql<boolean>`stream_messages.stream = 'events'
  and stream_messages.data->>'type' = ${resourceSampleType}
  and jsonb_typeof(stream_messages.data->'cpuCores') = 'number'
  and jsonb_typeof(stream_messages.data->'memoryBytes') = 'number'`;

/** A sample's CPU in cores, and its memory in bytes, as SQL numbers (float8: memory is under 2^53). */
export const sampleCpu = sql<number>`(stream_messages.data->>'cpuCores')::float8`;
export const sampleMemory = sql<number>`(stream_messages.data->>'memoryBytes')::float8`;

/** One reading of a job, as stored. */
export interface JobSample {
  readonly at: Date;
  readonly cpuCores: number;
  readonly memoryBytes: number;
  readonly attempt: number;
}

/** A job's samples in order (every attempt) and their peaks. */
export interface JobSamples {
  readonly samples: readonly JobSample[];
  readonly peakCpuCores: number;
  readonly peakMemoryBytes: number;
}

/**
 * The samples of job `jobId`, in stream order (lease, then sequence: the
 * primary key of stream_messages serves it), and the peaks; 404 for an
 * unknown job. `at` is the runner's reading time, or when the row was
 * stored if the runner's is not a time.
 */
export async function jobSamples(db: Kysely<Database>, jobId: string): Promise<JobSamples> {
  const id = checkJobId(jobId);
  await jobState(db, id);
  const rows = await db
    .selectFrom("stream_messages")
    .select([
      "attempt",
      "received_at",
      sql<string | null>`stream_messages.data->>'at'`.as("at"),
      sampleCpu.as("cpu"),
      sampleMemory.as("memory"),
      sql<number>`max(${sampleCpu}) over ()`.as("peak_cpu"),
      sql<number>`max(${sampleMemory}) over ()`.as("peak_memory"),
    ])
    .where("job_id", "=", id)
    .where(isResourceSample)
    .orderBy("lease_id")
    .orderBy("sequence")
    .execute();
  return {
    samples: rows.map((r) => ({ at: timeOr(r.at, r.received_at), cpuCores: Number(r.cpu), memoryBytes: Number(r.memory), attempt: r.attempt })),
    peakCpuCores: Number(rows[0]?.peak_cpu ?? 0),
    peakMemoryBytes: Number(rows[0]?.peak_memory ?? 0),
  };
}

function timeOr(text: string | null, fallback: Date): Date {
  const at = text ? new Date(text) : undefined;
  return at && !Number.isNaN(at.getTime()) ? at : fallback;
}
