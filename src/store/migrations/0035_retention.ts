import { sql, type Kysely } from "kysely";

/**
 * Indexes the retention prunes (src/ops/retention-kinds.ts) read by: each kind finds its rows past
 * retention by a time column, so a prune reads only those rows, never the whole table; and the
 * artifact garbage collector asks uploads_digest whether an upload still names a blob.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`create index webhook_deliveries_finished on webhook_deliveries (finished_at)
    where finished_at is not null`.execute(db);
  await sql`create index issued_certificates_not_after on issued_certificates (not_after)`.execute(
    db,
  );
  await sql`create index schedule_fires_fired on schedule_fires (fired_at)`.execute(db);
  await sql`create index uploads_digest on uploads (digest) where state <> 'discarded'`.execute(db);
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
