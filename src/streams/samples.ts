import { sql, type Kysely, type RawBuilder } from "kysely";
import { checkJobId } from "../broker/ids.js";
import { storedItems } from "./stored-items.js";
import type { Database } from "../store/schema.js";
import { jobState } from "./read.js";

/**
 * The event type runners send a running job's CPU and memory as, on the
 * job's events stream: `{type, cpuCores, memoryBytes, at}` (docs/runner.md).
 */
const resourceSampleType = "resource.sample";

/**
 * The one predicate of "this event is a usable resource sample", on an
 * event's JSON (`data`): of that type, with figures that are JSON numbers.
 * Events are the runner's free-form JSON; anything else is skipped, never
 * cast and failed. Used on stored rows and on a batch being stored.
 */
function isResourceSampleData(data: RawBuilder<unknown>): RawBuilder<boolean> {
  return sql<boolean>`(${data}->>'type' = ${resourceSampleType}
    and jsonb_typeof(${data}->'cpuCores') = 'number'
    and jsonb_typeof(${data}->'memoryBytes') = 'number')`;
}

/**
 * A sample's CPU in cores and its memory in bytes, as SQL numbers (float8: memory is under 2^53).
 */
const sampleCpuOf = (data: RawBuilder<unknown>) => sql<number>`(${data}->>'cpuCores')::float8`;
const sampleMemoryOf = (data: RawBuilder<unknown>) =>
  sql<number>`(${data}->>'memoryBytes')::float8`;

/**
 * The part of the statement storing batches (append.ts) that folds the
 * samples of its events batches into job_peaks, the one row per job that
 * sizing reads: an upsert keeping the highest CPU and memory and counting
 * the samples. It writes only for a stored batch (`stored_items`) that holds
 * a sample, so other batches pay one pass over their items and no write. A
 * statement holds one events batch of a job at most: one row a job.
 */
export function foldPeaks(): RawBuilder<unknown> {
  const data = sql`m.data`;
  return sql`
    insert into job_peaks (job_id, peak_cpu_cores, peak_memory_bytes, samples)
    select m.job_id, max(${sampleCpuOf(data)}), max(${sampleMemoryOf(data)})::bigint, count(*)::int
    from ${storedItems} m
    where m.stream = 'events' and ${isResourceSampleData(data)}
    group by m.job_id
    on conflict (job_id) do update set
      peak_cpu_cores = greatest(job_peaks.peak_cpu_cores, excluded.peak_cpu_cores),
      peak_memory_bytes = greatest(job_peaks.peak_memory_bytes, excluded.peak_memory_bytes),
      samples = job_peaks.samples + excluded.samples`;
}

const rowData = sql`stream_messages.data`;
const sampleCpu = sampleCpuOf(rowData);
const sampleMemory = sampleMemoryOf(rowData);

/** One reading of a job, as stored. */
interface JobSample {
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
    .where("stream", "=", "events")
    .where(isResourceSampleData(rowData))
    .orderBy("lease_id")
    .orderBy("sequence")
    .execute();
  return {
    samples: rows.map((r) => ({
      at: timeOr(r.at, r.received_at),
      cpuCores: Number(r.cpu),
      memoryBytes: Number(r.memory),
      attempt: r.attempt,
    })),
    peakCpuCores: Number(rows[0]?.peak_cpu ?? 0),
    peakMemoryBytes: Number(rows[0]?.peak_memory ?? 0),
  };
}

function timeOr(text: string | null, fallback: Date): Date {
  const at = text ? new Date(text) : undefined;
  return at && !Number.isNaN(at.getTime()) ? at : fallback;
}
