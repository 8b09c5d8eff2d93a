import { sql, type Kysely } from "kysely";

/**
 * The identity lifecycle: one-time enrollment grants (only a hash of the
 * secret), the certificates the control plane issued, runner retirements,
 * and administrative actions in the audit trail beside identity decisions.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable("enrollment_grants")
    .addColumn("id", "uuid", (c) => c.primaryKey())
    .addColumn("token_sha256", "bytea", (c) => c.notNull().unique())
    .addColumn("workspace_id", "text", (c) => c.notNull())
    .addColumn("runner_id", "text")
    .addColumn("created_by", "text", (c) => c.notNull())
    .addColumn("created_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn("expires_at", "timestamptz", (c) => c.notNull())
    .addColumn("used_at", "timestamptz")
    .addColumn("used_by_runner", "text")
    .execute();

  await db.schema
    .createTable("issued_certificates")
    .addColumn("serial", "text", (c) => c.primaryKey())
    .addColumn("spiffe_id", "text", (c) => c.notNull())
    .addColumn("workspace_id", "text", (c) => c.notNull())
    .addColumn("runner_id", "text", (c) => c.notNull())
    .addColumn("not_before", "timestamptz", (c) => c.notNull())
    .addColumn("not_after", "timestamptz", (c) => c.notNull())
    .addColumn("issued_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn("issued_via", "text", (c) =>
      c.notNull().check(sql`issued_via in ('enroll', 'renew')`),
    )
    .addColumn("sha256", "text", (c) => c.notNull())
    .addColumn("grant_id", "uuid")
    .execute();
  await db.schema
    .createIndex("issued_certificates_identity")
    .on("issued_certificates")
    .columns(["workspace_id", "runner_id", "issued_at"])
    .execute();

  await db.schema
    .createTable("runner_retirements")
    .addColumn("workspace_id", "text", (c) => c.notNull())
    .addColumn("runner_id", "text", (c) => c.notNull())
    .addColumn("retired_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn("retired_by", "text", (c) => c.notNull())
    .addColumn("reason", "text", (c) => c.notNull())
    .addPrimaryKeyConstraint("runner_retirements_pkey", ["workspace_id", "runner_id"])
    .execute();

  await db.schema
    .alterTable("audit_records")
    .addColumn("kind", "text", (c) =>
      c
        .notNull()
        .defaultTo("decision")
        .check(sql`kind in ('decision', 'action')`),
    )
    .execute();
  await db.schema.alterTable("audit_records").addColumn("action", "text").execute();
  await db.schema.alterTable("audit_records").addColumn("target", "text").execute();
  // Security teams ask for the refusals first; they are a small share of all records.
  await sql`create index audit_records_denied on audit_records (id) where decision = 'deny'`.execute(
    db,
  );
}
