import { sql, type Kysely } from "kysely";

/**
 * Code routes: the repositories the control plane may fetch from and push to
 * (with their credentials, which never leave the control plane), and each
 * agent job's durable published commit.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable("repositories")
    .addColumn("name", "text", (c) => c.primaryKey())
    .addColumn("url", "text", (c) => c.notNull())
    // Plain text in the control plane's own database: only the control plane reads it.
    .addColumn("credential", "text")
    .addColumn("registered_by", "text", (c) => c.notNull())
    .addColumn("created_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn("updated_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  await db.schema
    .alterTable("jobs")
    .addColumn("published_commit", "text")
    .addColumn("published_branch", "text")
    .addColumn("published_at", "timestamptz")
    .execute();
}
