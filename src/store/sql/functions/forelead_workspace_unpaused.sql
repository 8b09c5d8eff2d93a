-- Claim clause "the workspace is not paused" (workspace_pauses): a paused workspace's queued jobs
-- are not leased; its live leases go on. broker/jobs/waiting.ts asks it to report
-- "workspace_paused". A table function of one row, so the planner inlines it where it is read (a
-- scalar SQL function holding a subquery is planned on every call instead).
create or replace function forelead_workspace_unpaused(p_workspace_id text)
returns table (unpaused boolean)
language sql stable
as $$
select not exists (select 1 from workspace_pauses p where p.workspace_id = p_workspace_id)
$$;
