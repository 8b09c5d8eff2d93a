import { sql, type Kysely } from "kysely";

/**
 * The steps still waiting on their job (queued or running), by job: the
 * sweep's probe for steps whose job settled on a path that moves no
 * pipeline (src/broker/pipelines/sequence.ts strandedStepJobs) reads this
 * small partial index instead of every step.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`create index pipeline_steps_open on pipeline_steps (job_id) where state in ('queued', 'running')`.execute(
    db,
  );
}
