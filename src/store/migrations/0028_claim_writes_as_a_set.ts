import { sql, type Kysely } from "kysely";

/**
 * forelead_claim writes the leases of a call as one set.
 *
 * Until now each request's pick was written by its own statement inside the
 * loop (insert the lease, update the job, insert job.leased): ~270 µs of
 * Postgres a leased job in a lease-throughput run at N = 64, most of it the
 * statement's own start and end rather than its three rows
 * (docs/performance.md, "Profiling and what changed" 9). Now the loop only
 * picks — the same candidate search, rules and order as migration 0019 — and
 * forelead_claim_write writes every pick of the call in one statement. Two
 * things the written leases did for later requests of the same call are
 * done by the loop itself while picks are unwritten:
 *
 * - a job picked is excluded from later searches by its id: SKIP LOCKED
 *   does not skip rows locked by the same transaction, and the job is still
 *   'queued' until written;
 * - a runner's picks count against its slots beside its live leases.
 *
 * A concurrency group's count is a statement over running jobs, so the picks
 * so far are written before a grouped candidate's count is taken (the group
 * rules of 0019 are otherwise unchanged). The lease, the job and the event
 * of each pick are the same rows as before; only the statements differ.
 * The settings of migration 0025 are repeated (a create or replace drops
 * them), and the write function has the same ones: its generic plan must
 * reach jobs by its key however many picks it is given.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    create function forelead_claim_write(p_workspace_ids text[], p_runner_ids text[], p_token_hashes_hex text[], p_lease_seconds int,
      p_jobs uuid[], p_for int[], p_attempts int[])
    returns setof jobs
    language plpgsql volatile
    set plan_cache_mode = force_generic_plan
    set enable_seqscan = off
    set enable_sort = off
    as $$
    begin
      return query
        with lease as (
          insert into leases (token_sha256, job_id, workspace_id, runner_id, attempt, expires_at)
          select decode(p_token_hashes_hex[k.i], 'hex'), k.job_id, p_workspace_ids[k.i], p_runner_ids[k.i], k.attempts + 1, now() + make_interval(secs => p_lease_seconds)
          from unnest(p_jobs, p_for, p_attempts) as k(job_id, i, attempts)
          returning id, job_id, runner_id, token_sha256, attempt, expires_at
        ), leased_job as (
          update jobs j set
            state = 'running', attempts = lease.attempt, runner_id = lease.runner_id, lease_id = lease.id,
            lease_token_sha256 = lease.token_sha256, lease_expires_at = lease.expires_at, updated_at = now()
          from lease where j.id = lease.job_id
          returning j.*
        ), event as (
          insert into events (type, workspace_id, runner_id, job_id, data)
          select 'job.leased', l.workspace_id, l.runner_id, l.id, jsonb_build_object('attempt', l.attempts)
          from leased_job l
        )
        select * from leased_job;
    end
    $$`.execute(db);
  await sql`
    create or replace function forelead_claim(p_workspace_ids text[], p_runner_ids text[], p_token_hashes_hex text[], p_lease_seconds int)
    returns setof jobs
    language plpgsql volatile
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
      -- Every runner's row first, in the caller's order (see the migration's comment on deadlocks).
      for i in 1 .. n loop
        update runners set last_seen_at = now()
        where workspace_id = p_workspace_ids[i] and runner_id = p_runner_ids[i] and retired_at is null
        returning * into runner;
        if not found then
          raise exception using errcode = 'FL001',
            message = format('runner "%s" is not registered in workspace "%s"; POST /v1/runner/register first', p_runner_ids[i], p_workspace_ids[i]);
        end if;
        held := held || runner;
      end loop;
      for i in 1 .. n loop
        runner := held[i];
        -- Paused (the runner, or its workspace): no new lease; its live leases go on.
        continue when runner.paused_at is not null
          or exists (select 1 from workspace_pauses where workspace_id = p_workspace_ids[i]);
        excluded := '{}';
        -- The workspace's running groups, counted once per request (not per candidate row).
        select coalesce(array_agg(g.concurrency_key), '{}'), coalesce(array_agg(g.running), '{}') into group_keys, group_counts
        from forelead_running_groups(p_workspace_ids[i]) g;
        -- This runner's picks of earlier requests in this call count against its slots as its leases do.
        select count(*) into picked_by_runner from unnest(picked_for) k
        where p_workspace_ids[k] = p_workspace_ids[i] and p_runner_ids[k] = p_runner_ids[i];
        loop
          select j.id, j.attempts, j.concurrency_key, j.concurrency_limit into cand from jobs j
          where j.workspace_id = p_workspace_ids[i] and j.state = 'queued' and j.claimable_at <= now()
            and j.labels <@ runner.labels
            and forelead_meets_requirements(j.req_architecture, j.req_os, j.req_execution_kind, j.req_features,
              runner.architecture, runner.os, runner.execution_kinds, runner.features)
            and (j.concurrency_key is null
              or (not j.concurrency_key = any(excluded) and coalesce(group_counts[array_position(group_keys, j.concurrency_key)], 0) < j.concurrency_limit))
            and not j.id = any(picked)
            and (select count(*) from leases
                 where workspace_id = p_workspace_ids[i] and runner_id = p_runner_ids[i]
                   and ended_at is null and expires_at > now()) + picked_by_runner < runner.slots
          order by j.priority desc, j.created_at, j.id
          limit 1
          for update of j skip locked;
          exit when not found or cand.concurrency_key is null;
          -- A job of a concurrency group: what was picked so far is written first, so that the
          -- group's count below (a new statement) sees every lease of this call too.
          if cardinality(picked) > 0 then
            return query select * from forelead_claim_write(p_workspace_ids, p_runner_ids, p_token_hashes_hex, p_lease_seconds, picked, picked_for, picked_attempts);
            get diagnostics got = row_count;
            leased := leased + got;
            picked := '{}'; picked_for := '{}'; picked_attempts := '{}'; picked_by_runner := 0;
          end if;
          if not group_locked then
            perform pg_advisory_xact_lock(hashtextextended(p_workspace_ids[i] || chr(31) || cand.concurrency_key, 0));
            group_locked := true;
          elsif not pg_try_advisory_xact_lock(hashtextextended(p_workspace_ids[i] || chr(31) || cand.concurrency_key, 0)) then
            excluded := excluded || cand.concurrency_key;
            contended := contended || p_workspace_ids[i];
            continue;
          end if;
          -- A new statement, a new snapshot: every lease of the group committed before the lock.
          exit when forelead_group_running(p_workspace_ids[i], cand.concurrency_key) < cand.concurrency_limit;
          excluded := excluded || cand.concurrency_key;
        end loop;
        continue when cand.id is null;
        picked := picked || cand.id;
        picked_for := picked_for || i;
        picked_attempts := picked_attempts || cand.attempts;
      end loop;
      if cardinality(picked) > 0 then
        return query select * from forelead_claim_write(p_workspace_ids, p_runner_ids, p_token_hashes_hex, p_lease_seconds, picked, picked_for, picked_attempts);
        get diagnostics got = row_count;
        leased := leased + got;
      end if;
      -- A group skipped because another claim held its lock: wake the workspace at our commit.
      perform pg_notify('forelead_jobs', w) from (select distinct unnest(contended) as w) c;
      if leased = 0 and cardinality(contended) = 0 then
        perform set_config('synchronous_commit', 'off', true);
      end if;
    end
    $$`.execute(db);
  await sql`alter function forelead_claim(text[], text[], text[], int)
    set plan_cache_mode = force_generic_plan
    set enable_seqscan = off
    set enable_sort = off`.execute(db);
}
