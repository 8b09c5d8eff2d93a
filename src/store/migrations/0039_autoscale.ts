import { sql, type Kysely } from "kysely";

/**
 * Autoscaling: scaling_groups, the groups autoscale controllers register, each held by one
 * controller instance under a lease (a second controller is refused while the lease is live; a
 * dead controller's groups are taken over after it); runners.drain_ordered_by, who ordered the
 * runner to drain (POST /v1/admin/runners/{runnerId}/drain); forelead_claim gives a draining
 * runner no lease.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`create table scaling_groups (
    name text primary key,
    workspace_id text not null,
    labels text[] not null,
    architecture text,
    os text,
    execution_kinds text[] not null default '{}',
    features text[] not null default '{}',
    min_runners int not null,
    max_runners int not null,
    slots_per_runner int not null,
    idle_seconds int not null,
    cooldown_seconds int not null,
    provider text not null,
    controller text not null,
    lease_expires_at timestamptz not null,
    registered_at timestamptz not null default now(),
    updated_at timestamptz not null default now(),
    check (min_runners >= 0 and max_runners >= greatest(min_runners, 1) and slots_per_runner >= 1)
  )`.execute(db);
  await sql`alter table runners add column drain_ordered_by text`.execute(db);
  for (const statement of Object.values(functions)) await sql.raw(statement).execute(db);
}

/**
 * Frozen copies of the functions' source files (src/store/sql/functions) as they are at this
 * migration, written by `npm run migration:new`: never edited.
 */
export const functions: Readonly<Record<string, string>> = {
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
  group_locked boolean := false;
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
    -- The workspace's running groups, counted once per request (not per candidate row).
    select coalesce(array_agg(g.concurrency_key), '{}'), coalesce(array_agg(g.running), '{}')
    into group_keys, group_counts
    from forelead_running_groups(p_workspace_ids[i]) g;
    -- This runner's picks of earlier requests in this call count against its slots, as its leases.
    select count(*) into picked_by_runner from unnest(picked_for) k
    where p_workspace_ids[k] = p_workspace_ids[i] and p_runner_ids[k] = p_runner_ids[i];
    loop
      select j.id, j.attempts, j.concurrency_key, j.concurrency_limit into cand from jobs j
      where j.workspace_id = p_workspace_ids[i] and j.state = 'queued'
        and forelead_job_due(j.claimable_at)
        and forelead_labels_match(j.labels, runner.labels)
        and forelead_meets_requirements(
          j.req_architecture, j.req_os, j.req_execution_kind, j.req_features,
          runner.architecture, runner.os, runner.execution_kinds, runner.features)
        and forelead_group_has_room(j.concurrency_key, j.concurrency_limit,
          coalesce(group_counts[array_position(group_keys, j.concurrency_key)], 0))
        and (j.concurrency_key is null or not j.concurrency_key = any(excluded))
        and not j.id = any(picked)
        and forelead_slot_free(
          (select l.n from forelead_live_leases(p_workspace_ids[i], p_runner_ids[i]) l)
            + picked_by_runner,
          runner.slots)
      order by j.priority desc, j.fair_tag nulls first, j.created_at, j.id
      limit 1
      for update of j skip locked;
      exit when not found or cand.concurrency_key is null;
      -- A job of a concurrency group: what was picked so far is written first, so that the
      -- group's count below (a new statement) sees every lease of this call too.
      if cardinality(picked) > 0 then
        return query select * from forelead_claim_write(p_workspace_ids, p_runner_ids,
          p_token_hashes_hex, p_lease_seconds, picked, picked_for, picked_attempts);
        get diagnostics got = row_count;
        leased := leased + got;
        picked := '{}'; picked_for := '{}'; picked_attempts := '{}'; picked_by_runner := 0;
      end if;
      if not group_locked then
        perform pg_advisory_xact_lock(
          hashtextextended(p_workspace_ids[i] || chr(31) || cand.concurrency_key, 0));
        group_locked := true;
      elsif not pg_try_advisory_xact_lock(
          hashtextextended(p_workspace_ids[i] || chr(31) || cand.concurrency_key, 0)) then
        excluded := excluded || cand.concurrency_key;
        contended := contended || p_workspace_ids[i];
        continue;
      end if;
      -- A new statement, a new snapshot: every lease of the group committed before the lock.
      exit when forelead_group_has_room(cand.concurrency_key, cand.concurrency_limit,
        forelead_group_running(p_workspace_ids[i], cand.concurrency_key));
      excluded := excluded || cand.concurrency_key;
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
