import { sql, type Kysely } from "kysely";

/**
 * Rate limits (docs/fleet.md, "Scheduling"): rate_limits, named limits of at most max_starts job
 * starts per window_seconds (1 or 60) across all replicas, with the limit's recent start times
 * (starts); jobs.rate_limit names one (a job without it never reads rate_limits). forelead_claim
 * takes a start from the row in its own statement (forelead_rate_limit_room,
 * forelead_rate_limit_started); broker/jobs/waiting.ts explains a held job with
 * forelead_rate_limit_next.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    create table rate_limits (
      name text primary key,
      max_starts integer not null check (max_starts > 0),
      window_seconds integer not null check (window_seconds in (1, 60)),
      starts timestamptz[] not null default '{}',
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now()
    )`.execute(db);
  await sql`alter table jobs add column rate_limit text references rate_limits (name)`.execute(db);
  for (const statement of Object.values(functions)) await sql.raw(statement).execute(db);
}

/**
 * Frozen copies of the functions' source files (src/store/sql/functions) as they are at this
 * migration, written by `npm run migration:new`: never edited.
 */
export const functions: Readonly<Record<string, string>> = {
  forelead_rate_limit_room: `create or replace function forelead_rate_limit_room(
  p_starts timestamptz[], p_max int, p_window_seconds int, p_at timestamptz
)
returns boolean
language sql stable
as $$
select coalesce(p_at > max(e) - make_interval(secs => p_window_seconds), true)
  and count(*) filter (where e > p_at - make_interval(secs => p_window_seconds)
    and e < p_at + make_interval(secs => p_window_seconds)) < p_max
from unnest(p_starts) e
$$;
`,
  forelead_rate_limit_next: `create or replace function forelead_rate_limit_next(
  p_starts timestamptz[], p_max int, p_window_seconds int, p_at timestamptz
)
returns timestamptz
language sql stable
as $$
select coalesce(
  (select e + make_interval(secs => p_window_seconds) from unnest(p_starts) e
    where e > p_at - make_interval(secs => p_window_seconds) and e <= p_at
    order by e desc offset greatest(p_max, 1) - 1 limit 1),
  p_at)
$$;
`,
  forelead_rate_limit_started: `create or replace function forelead_rate_limit_started(
  p_starts timestamptz[], p_window_seconds int, p_at timestamptz
)
returns timestamptz[]
language sql stable
as $$
select array(
  select e from unnest(p_starts || p_at) e
  where e > greatest(p_at, (select max(x) from unnest(p_starts) x))
    - make_interval(secs => 2 * p_window_seconds)
  order by e)
$$;
`,
  forelead_claim: `create or replace function forelead_claim(
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
`,
};
