-- The running jobs of each concurrency group (jobs.concurrency_key) of a
-- workspace, counted by key from the index jobs_running_group.
create or replace function forelead_running_groups(p_workspace_id text)
returns table (concurrency_key text, running int)
language sql stable
as $$
select concurrency_key, count(*)::int from jobs where workspace_id = p_workspace_id and concurrency_key is not null and state = 'running' group by concurrency_key
$$;
