-- A runner's live leases, n: not ended and not expired (the live-lease rule of
-- broker/leases/sql-fragments.ts), counted from leases_open_by_runner. What forelead_slot_free
-- weighs against its slots. A table function, so the planner inlines it where it is read (a scalar SQL function
-- holding a subquery is planned on every call instead).
create or replace function forelead_live_leases(p_workspace_id text, p_runner_id text)
returns table (n int)
language sql stable
as $$
select count(*)::int from leases l
where l.workspace_id = p_workspace_id and l.runner_id = p_runner_id
  and l.ended_at is null and l.expires_at > now()
$$;
