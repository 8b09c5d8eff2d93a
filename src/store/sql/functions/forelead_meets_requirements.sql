-- Whether a runner meets a job's requirements (jobs.req_* against runners.os,
-- execution_kinds, features and architecture): each set requirement equals the
-- runner's, or is among its execution kinds; every required feature is one it has.
-- Plain SQL over its arguments, so the planner inlines it into forelead_claim;
-- broker/jobs/waiting.ts calls it too, one requirement at a time, to name the unmet one.
create or replace function forelead_meets_requirements(j_architecture text, j_os text, j_execution_kind text, j_features text[], r_architecture text, r_os text, r_execution_kinds text[], r_features text[])
returns boolean
language sql immutable
as $$
select (j_architecture is null or j_architecture = r_architecture)
  and (j_os is null or j_os = r_os)
  and (j_execution_kind is null or j_execution_kind = any(r_execution_kinds))
  and j_features <@ r_features
$$;
