import { sql, type Kysely } from "kysely";

/**
 * Sizing (src/streams/sizing.ts) reads the jobs settled since a time; this
 * index finds them without scanning every job. Their resource samples are
 * events rows, reached through the stream_messages primary key by job id,
 * so samples need no table of their own.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`create index jobs_settled_at on jobs (settled_at) where settled_at is not null`.execute(db);
}
