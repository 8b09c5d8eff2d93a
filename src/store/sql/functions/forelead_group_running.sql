-- The running jobs of one concurrency group of a workspace (0 when none):
-- forelead_running_groups for one key, the count forelead_claim takes after the
-- group's advisory lock, and that broker/jobs/waiting.ts reports.
create or replace function forelead_group_running(p_workspace_id text, p_key text)
returns int
language sql stable
as $$
select coalesce((select g.running from forelead_running_groups(p_workspace_id) g where g.concurrency_key = p_key), 0)
$$;
