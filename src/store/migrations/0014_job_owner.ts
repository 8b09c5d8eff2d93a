import { sql, type Kysely } from "kysely";

/**
 * The SPIFFE ID that enqueued each job: an identity may always read and
 * cancel the jobs it enqueued, whatever its roles are now. Jobs enqueued
 * before this migration have none (only roles decide for them).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`alter table jobs add column enqueued_by text`.execute(db);
}
