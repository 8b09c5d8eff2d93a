import { sql, type Kysely } from "kysely";

/**
 * A job's result and its last progress (docs/job-contract.md): `result` is
 * the JSON object the completion that settled the job reported (at most
 * 1 MiB of JSON, src/protocol/job-result.ts), `progress` the last
 * job.progress event the runner sent, folded in by the statement that
 * stores an events batch (src/streams/progress.ts). Both nullable: jobs
 * before this migration, and jobs that report neither, have none.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`alter table jobs add column result jsonb, add column progress jsonb`.execute(db);
}
