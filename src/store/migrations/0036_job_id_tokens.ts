import { sql, type Kysely } from "kysely";

/**
 * A job may be given signed ID tokens under its lease only for the audiences its enqueue allowed:
 * jobs.id_token_audiences (null: none; docs/workload-identity.md).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`alter table jobs add column id_token_audiences text[]`.execute(db);
}
