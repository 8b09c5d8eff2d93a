-- Claim clause "group room": a job of a concurrency group (jobs.concurrency_key) may run while
-- fewer than its concurrency_limit jobs of the group run in its workspace (p_running, counted by
-- forelead_running_groups or forelead_group_running); a job of no group always may.
-- broker/jobs/waiting.ts asks it to report "concurrency_group".
create or replace function forelead_group_has_room(p_key text, p_limit int, p_running int)
returns boolean
language sql immutable
as $$
select p_key is null or p_running < p_limit
$$;
