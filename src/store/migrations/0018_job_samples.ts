import { sql, type Kysely } from "kysely";

/**
 * Per-job peaks of the resource samples runners send (resource.sample
 * events): one row per job, raised by the statement that stores an events
 * batch (src/streams/append.ts), so sizing (src/streams/sizing.ts) reads one
 * row per job instead of every sample. The samples themselves stay events
 * rows. No foreign key, as on the stream tables: it would cost an index
 * probe on the ingest path, and jobs are never deleted.
 *
 * Sizing finds the jobs settled since a time by jobs_settled (migration 0017).
 * Measured on a local Postgres 15 (2 cores under a load average of ~16;
 * 100,000 settled jobs over 30 days, 12 samples each): sizing a week (23,000
 * jobs, 14 groups) took ~15 s when it read the samples rows (a hash join over
 * all 1.2 M of them) and 0.5–0.8 s from job_peaks (bitmap scan of
 * jobs_settled, hash join to job_peaks); a day 0.15 s, 30 days 2.3 s.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable("job_peaks")
    .addColumn("job_id", "uuid", (c) => c.primaryKey())
    .addColumn("peak_cpu_cores", "float8", (c) => c.notNull())
    .addColumn("peak_memory_bytes", "bigint", (c) => c.notNull())
    .addColumn("samples", "integer", (c) => c.notNull())
    .execute();
  // Samples stored before this migration.
  await sql`
    insert into job_peaks (job_id, peak_cpu_cores, peak_memory_bytes, samples)
    select job_id, max((data->>'cpuCores')::float8), max((data->>'memoryBytes')::float8)::bigint, count(*)::int
    from stream_messages
    where stream = 'events' and data->>'type' = 'resource.sample'
      and jsonb_typeof(data->'cpuCores') = 'number' and jsonb_typeof(data->'memoryBytes') = 'number'
    group by job_id`.execute(db);
  // jobs(settled_at) is indexed by 0017 (jobs_settled), which sizing uses too.
}
