-- Trigger jobs_erase_secrets (after update of state on jobs): a settled job's
-- secrets (job_secrets) are deleted in the transaction that settles it.
create or replace function forelead_erase_job_secrets()
returns trigger
language plpgsql volatile
as $$
begin
  delete from job_secrets where job_id = new.id;
  return null;
end
$$;
