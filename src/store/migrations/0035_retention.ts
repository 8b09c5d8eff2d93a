import { sql, type Kysely } from "kysely";

/**
 * Indexes the retention prunes (src/ops/retention-kinds.ts) read by: each kind finds its rows past
 * retention by a time column, so a prune reads only those rows, never the whole table; and the
 * artifact garbage collector asks uploads_digest whether an upload still names a blob; deleting a
 * job checks the foreign keys that name it (retry_of, retried_by, uploads) by an index each.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`create index webhook_deliveries_finished on webhook_deliveries (finished_at)
    where finished_at is not null`.execute(db);
  await sql`create index issued_certificates_not_after on issued_certificates (not_after)`.execute(
    db,
  );
  await sql`create index schedule_fires_fired on schedule_fires (fired_at)`.execute(db);
  await sql`create index uploads_digest on uploads (digest) where state <> 'discarded'`.execute(db);
  // Deleting a job or a lease checks every foreign key that names it: without these, each check
  // would read the whole referencing table.
  await sql`create index uploads_job on uploads (job_id)`.execute(db);
  await sql`create index uploads_lease on uploads (lease_id)`.execute(db);
  await sql`create index jobs_retry_of on jobs (retry_of) where retry_of is not null`.execute(db);
  await sql`create index jobs_retried_by on jobs (retried_by) where retried_by is not null`.execute(
    db,
  );
  await sql`create index runners_last_seen on runners (last_seen_at) where retired_at is null`.execute(
    db,
  );
  for (const statement of Object.values(functions)) await sql.raw(statement).execute(db);
}

/**
 * Frozen copies of the functions' source files (src/store/sql/functions) as they are at this
 * migration, written by `npm run migration:new`: never edited.
 */
export const functions: Readonly<Record<string, string>> = {};
