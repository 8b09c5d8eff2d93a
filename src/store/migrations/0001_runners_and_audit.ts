import { sql, type Kysely } from "kysely";

/** Runner registrations and the identity audit trail. */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable("runners")
    .addColumn("workspace_id", "text", (c) => c.notNull())
    .addColumn("runner_id", "text", (c) => c.notNull())
    .addColumn("slots", "integer", (c) => c.notNull())
    .addColumn("cpu", "integer", (c) => c.notNull())
    .addColumn("memory_bytes", "bigint", (c) => c.notNull())
    .addColumn("architecture", "text", (c) => c.notNull())
    .addColumn("labels", sql`text[]`, (c) => c.notNull())
    .addColumn("clock_offset_ns", "bigint", (c) => c.notNull())
    .addColumn("registered_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn("updated_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn("last_seen_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn("retired_at", "timestamptz")
    .addPrimaryKeyConstraint("runners_pkey", ["workspace_id", "runner_id"])
    .execute();

  await db.schema
    .createTable("audit_records")
    .addColumn("id", "bigserial", (c) => c.primaryKey())
    .addColumn("at", "timestamptz", (c) => c.notNull())
    .addColumn("route", "text", (c) => c.notNull())
    .addColumn("decision", "text", (c) => c.notNull().check(sql`decision in ('allow', 'deny')`))
    .addColumn("reason", "text", (c) => c.notNull())
    .addColumn("spiffe_id", "text")
    .addColumn("certificate_serial", "text")
    .addColumn("certificate_sha256", "text")
    .addColumn("certificate_not_after", "timestamptz")
    .addColumn("remote_address", "text")
    .execute();
  await db.schema.createIndex("audit_records_at").on("audit_records").column("at").execute();
  await db.schema
    .createIndex("audit_records_spiffe_id")
    .on("audit_records")
    .columns(["spiffe_id", "at"])
    .execute();
}
