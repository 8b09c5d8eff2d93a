-- The fair-share clock of a workspace (fair shares, docs/design.md "Fair shares"): the share tag
-- (jobs.fair_tag) of the keyed job started last, read as the highest tag running; with none
-- running, the lowest tag queued; with neither, 0. A key that starts a backlog starts it from here,
-- so an idle key saves no credit and a new key waits at most one turn of the keys already queued.
-- Read from the index jobs_fair_tags.
create or replace function forelead_fair_clock(p_workspace_id text)
returns table (at double precision)
language sql stable
as $$
select coalesce(
  (select max(j.fair_tag) from jobs j
    where j.workspace_id = p_workspace_id and j.state = 'running' and j.fair_tag is not null),
  (select min(j.fair_tag) from jobs j
    where j.workspace_id = p_workspace_id and j.state = 'queued' and j.fair_tag is not null),
  0)
$$;
