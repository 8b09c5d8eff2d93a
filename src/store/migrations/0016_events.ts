import { sql, type Kysely } from "kysely";

/**
 * The global event stream (src/events/) and pause-aware claims.
 *
 * events: one durable row per change an operator follows, written in the
 * transaction of the change. `tx` is the writing transaction's id, taken
 * before the row's id (its column default runs first, and every writer has
 * changed another row before it records the event): a follower that sees a
 * gap in the ids waits for the transactions in flight at its read to end,
 * after which a missing id is final (a rolled-back write). A statement
 * trigger NOTIFYs forelead_events once per statement that wrote any, payload-less,
 * so followers on every replica read on at commit.
 *
 * forelead_claim (migration 0008) replaced: the same claim, plus the pause
 * rules (a paused runner's row is still touched, as a sign of life, but it
 * leases nothing; a paused workspace's jobs are not picked) and a job.leased
 * event for each lease, in the same statement, so the hot path stays one
 * round trip.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    create table events (
      tx xid8 not null default pg_current_xact_id(),
      id bigint generated always as identity primary key,
      at timestamptz not null default now(),
      type text not null,
      workspace_id text,
      runner_id text,
      job_id uuid,
      data jsonb not null default '{}'::jsonb
    )`.execute(db);
  await sql`create index events_workspace on events (workspace_id, id)`.execute(db);
  await sql`create index events_at on events (at)`.execute(db);
  await sql`
    create function forelead_events_notify() returns trigger language plpgsql as $$
    begin
      if exists (select 1 from inserted) then
        perform pg_notify('forelead_events', '');
      end if;
      return null;
    end
    $$`.execute(db);
  // A statement trigger fires for an insert of no rows too (a claim that leased nothing): the
  // transition table tells them apart, so only a statement that wrote an event wakes followers.
  await sql`create trigger events_notify after insert on events referencing new table as inserted for each statement execute function forelead_events_notify()`.execute(
    db,
  );
  await sql`
    create or replace function forelead_claim(p_workspace_ids text[], p_runner_ids text[], p_token_hashes_hex text[], p_lease_seconds int)
    returns setof jobs
    language plpgsql volatile
    as $$
    declare
      i int;
      runner record;
      leased int := 0;
      got int;
    begin
      for i in 1 .. coalesce(array_length(p_runner_ids, 1), 0) loop
        update runners set last_seen_at = now()
        where workspace_id = p_workspace_ids[i] and runner_id = p_runner_ids[i] and retired_at is null
        returning slots, labels, paused_at into runner;
        if not found then
          raise exception using errcode = 'FL001',
            message = format('runner "%s" is not registered in workspace "%s"; POST /v1/runner/register first', p_runner_ids[i], p_workspace_ids[i]);
        end if;
        -- Paused (the runner, or its workspace): no new lease; its live leases go on.
        continue when runner.paused_at is not null
          or exists (select 1 from workspace_pauses where workspace_id = p_workspace_ids[i]);
        return query
          with live as (
            select count(*)::int as n from leases
            where workspace_id = p_workspace_ids[i] and runner_id = p_runner_ids[i]
              and ended_at is null and expires_at > now()
          ), pick as (
            select j.id, j.attempts from jobs j
            where j.workspace_id = p_workspace_ids[i] and j.state = 'queued'
              and j.labels <@ runner.labels
              and (select live.n from live) < runner.slots
            order by j.priority desc, j.created_at, j.id
            limit 1
            for update of j skip locked
          ), lease as (
            insert into leases (token_sha256, job_id, workspace_id, runner_id, attempt, expires_at)
            select decode(p_token_hashes_hex[i], 'hex'), pick.id, p_workspace_ids[i], p_runner_ids[i], pick.attempts + 1, now() + make_interval(secs => p_lease_seconds)
            from pick
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
      if leased = 0 then
        perform set_config('synchronous_commit', 'off', true);
      end if;
    end
    $$`.execute(db);
}
