import { sql, type Kysely } from "kysely";

/**
 * Two indexes that every job paid for in every write and nothing read:
 *
 * - jobs_idempotency held a row for every job, key or not (a unique index
 *   treats NULLs as distinct, so the keyless rows were never compared), and
 *   a job's row is written three times (enqueue, lease, settle) with none of
 *   them a HOT update (the state is in partial indexes' predicates). Now it
 *   holds only the jobs that carry a key; the enqueue's ON CONFLICT names the
 *   same predicate (src/broker/jobs.ts, insertedJobs).
 * - leases_job (0002) has the leading column of leases_job_stats (0017),
 *   which covers every read by job_id, the foreign key's checks included; a
 *   lease is written twice (issue, end), the end not HOT either.
 *
 * Measured in docs/performance.md ("Profiling and what changed" 9). The new
 * unique index is built before the old one is dropped, in this migration's
 * transaction: on a large jobs table the migration holds the table's write
 * lock for the length of one index build.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`create unique index jobs_idempotency_keyed on jobs (workspace_id, idempotency_key) where idempotency_key is not null`.execute(
    db,
  );
  await sql`drop index jobs_idempotency`.execute(db);
  await sql`alter index jobs_idempotency_keyed rename to jobs_idempotency`.execute(db);
  await sql`drop index leases_job`.execute(db);
}
