import { sql, type Kysely } from "kysely";

/**
 * Audit records get an id of their own, given when the decision is made, so a
 * record written twice (replayed from the spool after a crash, or retried after
 * a commit whose reply was lost) is stored once: inserts are
 * `on conflict (record_id) do nothing`. Aggregated refusals carry how many
 * requests they stand for and the time of the last one (`at` is the first).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable("audit_records").addColumn("record_id", "uuid").execute();
  await db.schema
    .createIndex("audit_records_record_id")
    .unique()
    .on("audit_records")
    .column("record_id")
    .execute();
  await db.schema
    .alterTable("audit_records")
    .addColumn("count", "integer", (c) =>
      c
        .notNull()
        .defaultTo(1)
        .check(sql`count >= 1`),
    )
    .execute();
  await db.schema.alterTable("audit_records").addColumn("last_at", "timestamptz").execute();
}
