import { sql, type Kysely } from "kysely";

/**
 * Artifact uploads and job result manifests. An upload belongs to the lease
 * that opened it; its bytes live in a staging file until finalize verifies
 * them and moves them into the blob store. `durable_size` is written only
 * after the staging file was fsynced, so it never claims bytes a crash could
 * lose. A job's manifest is a jsonb column, so the job view (and the stored
 * completion reply) carry it without a join.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable("uploads")
    .addColumn("id", "uuid", (c) => c.primaryKey())
    .addColumn("job_id", "uuid", (c) => c.notNull().references("jobs.id"))
    .addColumn("lease_id", "bigint", (c) => c.notNull().references("leases.id"))
    .addColumn("workspace_id", "text", (c) => c.notNull())
    .addColumn("runner_id", "text", (c) => c.notNull())
    .addColumn("name", "text", (c) => c.notNull())
    .addColumn("size", "bigint", (c) => c.notNull().check(sql`size >= 0`))
    .addColumn("digest", "text", (c) => c.notNull())
    .addColumn("media_type", "text", (c) => c.notNull())
    .addColumn("durable_size", "bigint", (c) =>
      c
        .notNull()
        .defaultTo(0)
        .check(sql`durable_size >= 0 and durable_size <= size`),
    )
    .addColumn("state", "text", (c) =>
      c.notNull().check(sql`state in ('open', 'finalized', 'discarded')`),
    )
    .addColumn("discard_reason", "text")
    .addColumn("created_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn("updated_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn("finalized_at", "timestamptz")
    .execute();
  // One open upload per name and lease: opening it again finds the same upload. Also serves
  // the sweep of open uploads whose lease has ended (lease_id leads).
  await sql`create unique index uploads_open_name on uploads (lease_id, name) where state = 'open'`.execute(
    db,
  );
  // The completion's manifest check: which digests this job finalized.
  await sql`create index uploads_finalized_digest on uploads (job_id, digest) where state = 'finalized'`.execute(
    db,
  );

  await sql`alter table jobs add column artifacts jsonb`.execute(db);
}
