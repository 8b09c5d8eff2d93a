-- Claim clause "due": a queued job is claimable from its claimable_at on (enqueue, runAt or
-- delaySeconds, a retry's backoff). Inlined into forelead_claim's candidate search, where it is an
-- index condition of jobs_claimable; broker/jobs/waiting.ts asks it to report
-- "scheduled"/"backoff".
create or replace function forelead_job_due(p_claimable_at timestamptz)
returns boolean
language sql stable
as $$
select p_claimable_at <= now()
$$;
