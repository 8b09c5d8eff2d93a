-- Whether a job is a pipeline step's (pipeline_steps), as a volatile function: it
-- reads with a snapshot of its own, taken when it is called. A claim is one
-- statement, `select ..., forelead_is_step_job(c.id) from forelead_claim(...) c`;
-- forelead_claim can lease a job whose enqueue committed after that statement
-- began, which an `exists` in the outer select would not see, and the lease
-- would go out without the step's inputs (test/integration/pipeline-inputs.test.ts).
create or replace function forelead_is_step_job(p_job_id uuid)
returns boolean
language plpgsql volatile
as $$
begin
  return exists (select 1 from pipeline_steps s where s.job_id = p_job_id);
end
$$;
