import { sql, type Kysely } from "kysely";

/**
 * What a claim may lease (issues 20 and 21): later, with backoff, in
 * concurrency groups, and only to a runner that meets the job's
 * requirements.
 *
 * jobs.claimable_at: a queued job is claimable from then on. Enqueue sets it
 * (now, runAt, or now + delaySeconds); a retry's requeue sets it to now plus
 * the backoff delay (lease-sql.ts retryClaimableAt, the one home of that
 * rule). Not null, so the claim's test is a plain `claimable_at <= now()`:
 * jobs_claimable is rebuilt with claimable_at as its last key, where btree
 * tests it on the index tuple (an Index Cond beside workspace_id), so a
 * scheduled job costs the walk one index tuple and no heap visit, and the
 * walk keeps the index's order (priority desc, created_at, id): no sort.
 * Plan on Postgres 15 (EXPLAIN ANALYZE of the pick, 100,000 queued, docs/fleet.md
 * "Scheduling" has the measurements):
 *   Limit -> LockRows -> Index Scan using jobs_claimable on jobs j
 *     Index Cond: ((workspace_id = 'w1') AND (claimable_at <= now()))
 *     Filter: labels <@ ..., the inlined requirements, the group's count < limit, state
 * jobs_scheduled indexes only the jobs whose claimable_at was put after their
 * creation (delayed or backed off), by workspace and time: a replica's due
 * timer (wakeups.ts) reads the next due time of a workspace from it in one probe.
 *
 * Requirements (jobs.req_*) against runner capabilities (runners.os,
 * execution_kinds, features; architecture since 0001): the rule is the
 * function forelead_meets_requirements, plain SQL over its arguments, so
 * the planner inlines it into the claim; waiting.ts calls it too, one
 * requirement at a time, to name the one no runner meets.
 *
 * Concurrency groups (jobs.concurrency_key, concurrency_limit): at most
 * limit jobs of a key run at once in a workspace. forelead_running_groups
 * counts them by key (jobs_running_group), forelead_group_running one key.
 * Exact across replicas, reasoned so: a claimer counts the workspace's
 * running groups once per request and picks a candidate whose group's count,
 * as of that snapshot, is under the limit (a cheap filter that may be stale:
 * an array lookup per candidate row, not a query).
 * For a candidate with a key it then takes pg_advisory_xact_lock on
 * (workspace, key) and recounts in a new statement. In READ COMMITTED each
 * statement of a volatile PL/pgSQL function takes a new snapshot, and the
 * lock is held by a competing claimer until its transaction ends, so the
 * recount sees every lease of the group committed before the lock was
 * granted, and no lease of the group can commit while we hold it: every
 * claimer that leases a job of the key does so holding the lock, and the
 * job's state becomes 'running' in the same transaction. A count under the
 * limit therefore stays under it until we commit, when the lock passes on
 * and the next claimer counts our job. Only a claim raises the count, so a
 * job settling meanwhile can only make the recount high, never low (it
 * under-uses a slot until the settle's wake). When the recount says full,
 * the key is excluded and the pick runs again: a full group never blocks
 * the other jobs of the workspace. The candidate's row lock is kept to the
 * end of the transaction (PL/pgSQL cannot drop it): others skip it, which
 * costs nothing as its group is full.
 *
 * Deadlocks: a claim call serves a batch of runners. All their rows are
 * locked first, in the caller's sorted order, so no runner lock is waited on
 * while holding a group lock. Within one call only the first group lock is
 * waited for; a later one is tried (pg_try_advisory_xact_lock), and when
 * another claimer holds it that key is skipped for this request and a wake
 * is sent for the workspace at commit, so a waiting claim looks again (and
 * then waits for the lock, as its first). Two calls therefore never wait on
 * each other's group locks in a cycle. Job rows are taken SKIP LOCKED.
 *
 * Runners also keep max_concurrency (what the runner reports; slots still
 * bound its leases).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`alter table jobs
    add column claimable_at timestamptz not null default now(),
    add column concurrency_key text,
    add column concurrency_limit int,
    add column backoff_initial_seconds double precision,
    add column backoff_multiplier double precision,
    add column backoff_max_seconds double precision,
    add column req_architecture text,
    add column req_os text,
    add column req_execution_kind text,
    add column req_features text[] not null default '{}'`.execute(db);
  await sql`alter table runners
    add column os text not null default '',
    add column execution_kinds text[] not null default '{}',
    add column features text[] not null default '{}',
    add column max_concurrency int not null default 0`.execute(db);
  await sql`drop index jobs_claimable`.execute(db);
  await sql`create index jobs_claimable on jobs (workspace_id, priority desc, created_at, id, claimable_at) where state = 'queued'`.execute(
    db,
  );
  await sql`create index jobs_scheduled on jobs (workspace_id, claimable_at) where state = 'queued' and claimable_at > created_at`.execute(
    db,
  );
  await sql`create index jobs_running_group on jobs (workspace_id, concurrency_key) where state = 'running' and concurrency_key is not null`.execute(
    db,
  );
  await sql`
    create function forelead_meets_requirements(j_architecture text, j_os text, j_execution_kind text, j_features text[],
      r_architecture text, r_os text, r_execution_kinds text[], r_features text[])
    returns boolean language sql immutable as $$
      select (j_architecture is null or j_architecture = r_architecture)
        and (j_os is null or j_os = r_os)
        and (j_execution_kind is null or j_execution_kind = any(r_execution_kinds))
        and j_features <@ r_features
    $$`.execute(db);
  await sql`
    create function forelead_running_groups(p_workspace_id text) returns table (concurrency_key text, running int) language sql stable as $$
      select concurrency_key, count(*)::int from jobs where workspace_id = p_workspace_id and concurrency_key is not null and state = 'running' group by concurrency_key
    $$`.execute(db);
  await sql`
    create function forelead_group_running(p_workspace_id text, p_key text) returns int language sql stable as $$
      select coalesce((select g.running from forelead_running_groups(p_workspace_id) g where g.concurrency_key = p_key), 0)
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
        loop
          select j.id, j.attempts, j.concurrency_key, j.concurrency_limit into cand from jobs j
          where j.workspace_id = p_workspace_ids[i] and j.state = 'queued' and j.claimable_at <= now()
            and j.labels <@ runner.labels
            and forelead_meets_requirements(j.req_architecture, j.req_os, j.req_execution_kind, j.req_features,
              runner.architecture, runner.os, runner.execution_kinds, runner.features)
            and (j.concurrency_key is null
              or (not j.concurrency_key = any(excluded) and coalesce(group_counts[array_position(group_keys, j.concurrency_key)], 0) < j.concurrency_limit))
            and (select count(*) from leases
                 where workspace_id = p_workspace_ids[i] and runner_id = p_runner_ids[i]
                   and ended_at is null and expires_at > now()) < runner.slots
          order by j.priority desc, j.created_at, j.id
          limit 1
          for update of j skip locked;
          exit when not found or cand.concurrency_key is null;
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
        return query
          with lease as (
            insert into leases (token_sha256, job_id, workspace_id, runner_id, attempt, expires_at)
            values (decode(p_token_hashes_hex[i], 'hex'), cand.id, p_workspace_ids[i], p_runner_ids[i], cand.attempts + 1, now() + make_interval(secs => p_lease_seconds))
            returning id, job_id, attempt, expires_at
          ), leased_job as (
            update jobs j set
              state = 'running', attempts = lease.attempt, runner_id = p_runner_ids[i], lease_id = lease.id,
              lease_token_sha256 = decode(p_token_hashes_hex[i], 'hex'), lease_expires_at = lease.expires_at, updated_at = now()
            from lease where j.id = lease.job_id
            returning j.*
          ), event as (
            insert into events (type, workspace_id, runner_id, job_id, data)
            select 'job.leased', l.workspace_id, l.runner_id, l.id, jsonb_build_object('attempt', l.attempts)
            from leased_job l
          )
          select * from leased_job;
        get diagnostics got = row_count;
        leased := leased + got;
      end loop;
      -- A group skipped because another claim held its lock: wake the workspace at our commit.
      perform pg_notify('forelead_jobs', w) from (select distinct unnest(contended) as w) c;
      if leased = 0 and cardinality(contended) = 0 then
        perform set_config('synchronous_commit', 'off', true);
      end if;
    end
    $$`.execute(db);
}
