-- Writes the leases forelead_claim picked in one call, as one set: for each pick
-- (p_jobs[k], picked for request p_for[k], its attempts so far p_attempts[k]) a
-- leases row, the job set running under it, and a job.leased event; returns the
-- leased jobs rows. The same plan settings as forelead_claim: its generic plan
-- reaches jobs by its key however many picks it is given.
create or replace function forelead_claim_write(p_workspace_ids text[], p_runner_ids text[], p_token_hashes_hex text[], p_lease_seconds int, p_jobs uuid[], p_for int[], p_attempts int[])
returns setof jobs
language plpgsql volatile
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
set enable_sort = off
as $$
begin
  return query
    with lease as (
      insert into leases (token_sha256, job_id, workspace_id, runner_id, attempt, expires_at)
      select decode(p_token_hashes_hex[k.i], 'hex'), k.job_id, p_workspace_ids[k.i], p_runner_ids[k.i], k.attempts + 1, now() + make_interval(secs => p_lease_seconds)
      from unnest(p_jobs, p_for, p_attempts) as k(job_id, i, attempts)
      returning id, job_id, runner_id, token_sha256, attempt, expires_at
    ), leased_job as (
      update jobs j set
        state = 'running', attempts = lease.attempt, runner_id = lease.runner_id, lease_id = lease.id,
        lease_token_sha256 = lease.token_sha256, lease_expires_at = lease.expires_at, updated_at = now()
      from lease where j.id = lease.job_id
      returning j.*
    ), event as (
      insert into events (type, workspace_id, runner_id, job_id, data)
      select 'job.leased', l.workspace_id, l.runner_id, l.id, jsonb_build_object('attempt', l.attempts)
      from leased_job l
    )
    select * from leased_job;
end
$$;
