import { sql, type Kysely } from "kysely";

/**
 * Jobs and their leases. A job row holds its current lease (token hash,
 * expiry); the leases table keeps every lease ever issued, so a call with an
 * old token can be told exactly why it is dead (released, expired, settled)
 * and so streams can be keyed by lease.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable("jobs")
    .addColumn("id", "uuid", (c) => c.primaryKey())
    .addColumn("workspace_id", "text", (c) => c.notNull())
    .addColumn("labels", sql`text[]`, (c) => c.notNull())
    .addColumn("kind", "text", (c) => c.notNull())
    .addColumn("repository", "text")
    .addColumn("target_branch", "text")
    .addColumn("base_commit", "text")
    .addColumn("base_tree", "text")
    .addColumn("spec", "jsonb", (c) => c.notNull())
    .addColumn("state", "text", (c) =>
      c.notNull().check(sql`state in ('queued', 'running', 'succeeded', 'failed', 'cancelled')`),
    )
    .addColumn("priority", "integer", (c) => c.notNull())
    .addColumn("attempts", "integer", (c) => c.notNull().defaultTo(0))
    .addColumn("max_attempts", "integer", (c) => c.notNull())
    .addColumn("idempotency_key", "text")
    .addColumn("request_sha256", "text", (c) => c.notNull())
    .addColumn("runner_id", "text")
    .addColumn("lease_id", "bigint")
    .addColumn("lease_token_sha256", "bytea")
    .addColumn("lease_expires_at", "timestamptz")
    .addColumn("cancel_requested", "boolean", (c) => c.notNull().defaultTo(false))
    .addColumn("exit_code", "integer")
    .addColumn("error", "jsonb")
    .addColumn("failure_reason", "text")
    .addColumn("failure_message", "text")
    .addColumn("created_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn("updated_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn("settled_at", "timestamptz")
    .execute();
  await db.schema
    .createIndex("jobs_idempotency")
    .unique()
    .on("jobs")
    .columns(["workspace_id", "idempotency_key"])
    .execute();
  // The claim's search order; partial, so settled jobs cost the claim nothing.
  await sql`create index jobs_claimable on jobs (workspace_id, priority desc, created_at, id) where state = 'queued'`.execute(
    db,
  );
  await sql`create index jobs_running_expiry on jobs (lease_expires_at) where state = 'running'`.execute(
    db,
  );
  await sql`create index jobs_newest on jobs (created_at desc, id desc)`.execute(db);

  await db.schema
    .createTable("leases")
    .addColumn("id", "bigserial", (c) => c.primaryKey())
    .addColumn("token_sha256", "bytea", (c) => c.notNull().unique())
    .addColumn("job_id", "uuid", (c) => c.notNull().references("jobs.id"))
    .addColumn("workspace_id", "text", (c) => c.notNull())
    .addColumn("runner_id", "text", (c) => c.notNull())
    .addColumn("attempt", "integer", (c) => c.notNull())
    .addColumn("issued_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn("expires_at", "timestamptz", (c) => c.notNull())
    .addColumn("ended_at", "timestamptz")
    .addColumn("end_reason", "text", (c) =>
      c.check(sql`end_reason in ('released', 'expired', 'settled', 'requeued')`),
    )
    .addColumn("completion_id", "text")
    .addColumn("completion_sha256", "text")
    .addColumn("completion_reply", "jsonb")
    .execute();
  await sql`create index leases_open_by_runner on leases (workspace_id, runner_id) where ended_at is null`.execute(
    db,
  );
  await db.schema.createIndex("leases_job").on("leases").column("job_id").execute();
}
