-- The claim: for each request i (runner p_runner_ids[i] of workspace
-- p_workspace_ids[i], lease token hash p_token_hashes_hex[i]) at most one job,
-- leased for p_lease_seconds; returns the leased jobs rows. One statement, so a
-- claim is one round trip (broker/leases/claim.ts).
--
-- Eligible: a queued job of the runner's workspace for which every claim clause
-- holds, each a function of its own that broker/jobs/waiting.ts asks one by one to
-- say why a job waits: forelead_job_due, forelead_workspace_unpaused,
-- forelead_runner_unpaused, forelead_labels_match, forelead_meets_requirements,
-- forelead_group_has_room and forelead_slot_free (live leases plus this call's
-- picks). They are plain SQL, inlined by the planner into the statements below.
-- Among the eligible, the highest priority, then the lowest share tag (jobs.fair_tag, set by
-- forelead_fair_tag for a job with a fairness key; a job without one has none and goes first),
-- then the oldest, FOR UPDATE SKIP LOCKED: no job is leased twice at once, across replicas.
-- Without fairness keys the order is priority, then age; with them the claim walks the same
-- index in the same way (docs/performance.md, "Fair shares: the claim with and without").
--
-- Slots are exact: every runner's row is updated (locked) first, so a runner's
-- concurrent claims count its live leases one after another.
--
-- Concurrency groups are exact across replicas. The workspace's running groups
-- are counted once per request (a cheap filter that may be stale). For a
-- candidate with a key the claim takes pg_advisory_xact_lock on (workspace,
-- key), writes its picks so far and recounts in a new statement (a new
-- snapshot, in READ COMMITTED): every claimer that leases a job of the key
-- holds that lock until its commit, so the recount sees every lease of the
-- group and none can commit meanwhile. A full group's key is excluded and the
-- pick runs again: a full group never blocks the rest of the workspace.
--
-- Rate limits are exact across replicas too. A candidate naming one
-- (jobs.rate_limit) takes its start from the limit's rate_limits row in an
-- update that locks the row until commit and holds only while
-- forelead_rate_limit_room does, appending the lease's start time (now()):
-- claimers of one limit take their starts one after another. A full limit's
-- name is excluded and the pick runs again. A job without a rate limit never
-- reads rate_limits (docs/performance.md, "Rate limits: the claim of a job
-- without one").
--
-- Deadlocks: all runner rows are locked first, in the caller's sorted order,
-- so no runner lock is waited on while holding a group lock or a rate limit's
-- row. Only the first such lock of a call is waited for; a later one is tried,
-- and when another claimer holds it that key or limit is skipped for this
-- request and the workspace is woken (NOTIFY forelead_jobs) at commit.
--
-- Picks are written as one set (forelead_claim_write) at the end, or before a
-- grouped candidate's recount; meanwhile a picked job is excluded by its id
-- (SKIP LOCKED does not skip our own locks) and counts against its runner's
-- slots. A call that leases nothing turns synchronous_commit off for its
-- transaction.
--
-- Plan settings: each statement is planned once per connection (generic plan),
-- with sequential scans and sorts priced out so the candidate search walks
-- jobs_claimable in its order and stops at the first row it can lock
-- (docs/performance.md, "Fewer round trips per job"). Postgres keeps these
-- settings on the function; every create or replace must state them, as here.
create or replace function forelead_claim(
  p_workspace_ids text[], p_runner_ids text[], p_token_hashes_hex text[], p_lease_seconds int
)
returns setof jobs
language plpgsql volatile
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
set enable_sort = off
as $$
declare
  i int;
  n int := coalesce(array_length(p_runner_ids, 1), 0);
  runner runners%rowtype;
  held runners[] := '{}';
  cand record;
  excluded text[];
  group_keys text[];
  group_counts int[];
  -- Whether this call has waited for a group lock or a rate limit's row (see Deadlocks).
  waited boolean := false;
  limited text[];
  contended text[] := '{}';
  leased int := 0;
  got int;
  -- Jobs picked and not yet written, with the request that picked each: written as one set.
  picked uuid[] := '{}';
  picked_for int[] := '{}';
  picked_attempts int[] := '{}';
  picked_by_runner int;
begin
  -- Every runner's row first, in the caller's order (see Deadlocks above).
  for i in 1 .. n loop
    update runners set last_seen_at = now()
    where workspace_id = p_workspace_ids[i] and runner_id = p_runner_ids[i] and retired_at is null
    returning * into runner;
    if not found then
      raise exception using errcode = 'FL001',
        message = format('runner "%s" is not registered in workspace "%s"; POST /v1/runner/register first',
          p_runner_ids[i], p_workspace_ids[i]);
    end if;
    held := held || runner;
  end loop;
  for i in 1 .. n loop
    runner := held[i];
    -- Paused (the runner, or its workspace) or draining: no new lease; its live leases go on.
    continue when not forelead_runner_unpaused(runner.paused_at) or runner.draining_at is not null
      or not (select w.unpaused from forelead_workspace_unpaused(p_workspace_ids[i]) w);
    excluded := '{}';
    limited := '{}';
    -- The workspace's running groups, counted once per request (not per candidate row).
    select coalesce(array_agg(g.concurrency_key), '{}'), coalesce(array_agg(g.running), '{}')
    into group_keys, group_counts
    from forelead_running_groups(p_workspace_ids[i]) g;
    -- This runner's picks of earlier requests in this call count against its slots, as its leases.
    select count(*) into picked_by_runner from unnest(picked_for) k
    where p_workspace_ids[k] = p_workspace_ids[i] and p_runner_ids[k] = p_runner_ids[i];
    loop
      select j.id, j.attempts, j.concurrency_key, j.concurrency_limit, j.rate_limit
      into cand from jobs j
      where j.workspace_id = p_workspace_ids[i] and j.state = 'queued'
        and forelead_job_due(j.claimable_at)
        and forelead_labels_match(j.labels, runner.labels)
        and forelead_meets_requirements(
          j.req_architecture, j.req_os, j.req_execution_kind, j.req_features,
          runner.architecture, runner.os, runner.execution_kinds, runner.features)
        and forelead_group_has_room(j.concurrency_key, j.concurrency_limit,
          coalesce(group_counts[array_position(group_keys, j.concurrency_key)], 0))
        and (j.concurrency_key is null or not j.concurrency_key = any(excluded))
        and (j.rate_limit is null or not j.rate_limit = any(limited))
        and not j.id = any(picked)
        and forelead_slot_free(
          (select l.n from forelead_live_leases(p_workspace_ids[i], p_runner_ids[i]) l)
            + picked_by_runner,
          runner.slots)
      order by j.priority desc, j.fair_tag nulls first, j.created_at, j.id
      limit 1
      for update of j skip locked;
      exit when not found;
      if cand.concurrency_key is not null then
        -- A job of a concurrency group: what was picked so far is written first, so that the
        -- group's count below (a new statement) sees every lease of this call too.
        if cardinality(picked) > 0 then
          return query select * from forelead_claim_write(p_workspace_ids, p_runner_ids,
            p_token_hashes_hex, p_lease_seconds, picked, picked_for, picked_attempts);
          get diagnostics got = row_count;
          leased := leased + got;
          picked := '{}'; picked_for := '{}'; picked_attempts := '{}'; picked_by_runner := 0;
        end if;
        if not waited then
          perform pg_advisory_xact_lock(
            hashtextextended(p_workspace_ids[i] || chr(31) || cand.concurrency_key, 0));
          waited := true;
        elsif not pg_try_advisory_xact_lock(
            hashtextextended(p_workspace_ids[i] || chr(31) || cand.concurrency_key, 0)) then
          excluded := excluded || cand.concurrency_key;
          contended := contended || p_workspace_ids[i];
          continue;
        end if;
        -- A new statement, a new snapshot: every lease of the group committed before the lock.
        if not forelead_group_has_room(cand.concurrency_key, cand.concurrency_limit,
            forelead_group_running(p_workspace_ids[i], cand.concurrency_key)) then
          excluded := excluded || cand.concurrency_key;
          continue;
        end if;
      end if;
      exit when cand.rate_limit is null;
      -- A job naming a rate limit: its row is locked by the update (waited for only as the
      -- call's first lock), which takes the start when the limit has room at now().
      if waited and not exists (select 1 from rate_limits r where r.name = cand.rate_limit
          for no key update skip locked) then
        limited := limited || cand.rate_limit;
        contended := contended || p_workspace_ids[i];
        continue;
      end if;
      waited := true;
      update rate_limits r
      set starts = forelead_rate_limit_started(r.starts, r.window_seconds, now())
      where r.name = cand.rate_limit
        and forelead_rate_limit_room(r.starts, r.max_starts, r.window_seconds, now());
      exit when found;
      limited := limited || cand.rate_limit;
    end loop;
    continue when cand.id is null;
    picked := picked || cand.id;
    picked_for := picked_for || i;
    picked_attempts := picked_attempts || cand.attempts;
  end loop;
  if cardinality(picked) > 0 then
    return query select * from forelead_claim_write(p_workspace_ids, p_runner_ids,
      p_token_hashes_hex, p_lease_seconds, picked, picked_for, picked_attempts);
    get diagnostics got = row_count;
    leased := leased + got;
  end if;
  -- A group skipped because another claim held its lock: wake the workspace at our commit.
  perform pg_notify('forelead_jobs', w) from (select distinct unnest(contended) as w) c;
  if leased = 0 and cardinality(contended) = 0 then
    perform set_config('synchronous_commit', 'off', true);
  end if;
end
$$;
