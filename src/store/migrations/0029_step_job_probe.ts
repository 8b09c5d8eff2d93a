import { sql, type Kysely } from "kysely";

/**
 * Whether a job is a pipeline step's, as a volatile function: it reads
 * pipeline_steps with a snapshot of its own, taken when it is called.
 *
 * A claim is one statement, `select …, <is it a step's job> from
 * forelead_claim(…)`. forelead_claim is volatile, so each of its statements
 * sees what has committed by then; an `exists` written in the outer select
 * sees only what had committed when the select began. A claim that began,
 * waited for its runner's row (another request of that runner holding it)
 * and then leased a step's job whose enqueue committed meanwhile read it as
 * "not a step's job", and the lease went out without the job's inputs
 * (test/integration/pipeline-inputs.test.ts reproduces the order). Called
 * here, the probe sees at least what the claim's own search saw.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    create function forelead_is_step_job(p_job_id uuid) returns boolean
    language plpgsql volatile
    as $$
    begin
      return exists (select 1 from pipeline_steps s where s.job_id = p_job_id);
    end
    $$
  `.execute(db);
}
