-- Claim clause "the runner is not paused" (runners.paused_at): a paused runner gets no new lease;
-- its live leases go on. broker/jobs/waiting.ts asks it to report "runners_paused".
create or replace function forelead_runner_unpaused(p_paused_at timestamptz)
returns boolean
language sql immutable
as $$
select p_paused_at is null
$$;
