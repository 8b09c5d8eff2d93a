import { sql, type Kysely } from "kysely";

/**
 * jobs.display_name: what people see a job called (an enqueue's displayName, or its pipeline
 * step's), checked by checkDisplayName in src/broker/jobs/rules.ts; null when it was given none.
 * The id stays the job's key.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`alter table jobs add column display_name text`.execute(db);
}
