import { sql, type Kysely } from "kysely";

/**
 * The claim as one server-side function, so a claim (or a batch of claims)
 * is one statement and one round trip instead of BEGIN, the runner lock, the
 * claim and COMMIT (docs/performance.md: Postgres round trips were a quarter
 * of the control plane's CPU, and each one waits for both event loops).
 *
 * Its guarantees are those of the two-statement claim it replaces
 * (src/broker/leases.ts, claimJob): for each request in turn, the runner's
 * row is updated first, which locks it, so claims by one runner queue behind
 * each other; then the claim statement counts the runner's live leases. In a
 * VOLATILE PL/pgSQL function under READ COMMITTED every statement takes a
 * fresh snapshot, so that count sees every lease committed before the lock
 * was granted, and the leases made by earlier requests of the same call. Jobs
 * are picked FOR UPDATE SKIP LOCKED: concurrent claims on any replica never
 * take the same job. Callers pass requests sorted by (workspace, runner), so
 * two calls lock runner rows in the same order and cannot deadlock.
 *
 * A runner that is not registered (or retired) raises SQLSTATE FL001, which
 * rolls the call back. A call that leased nothing commits without waiting
 * for the WAL flush: it changed only last_seen_at, which a crash may lose.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    create function forelead_claim(p_workspace_ids text[], p_runner_ids text[], p_token_hashes_hex text[], p_lease_seconds int)
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
        returning slots, labels into runner;
        if not found then
          raise exception using errcode = 'FL001',
            message = format('runner "%s" is not registered in workspace "%s"; POST /v1/runner/register first', p_runner_ids[i], p_workspace_ids[i]);
        end if;
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
          )
          update jobs j set
            state = 'running', attempts = lease.attempt, runner_id = p_runner_ids[i], lease_id = lease.id,
            lease_token_sha256 = decode(p_token_hashes_hex[i], 'hex'), lease_expires_at = lease.expires_at, updated_at = now()
          from lease where j.id = lease.job_id
          returning j.*;
        get diagnostics got = row_count;
        leased := leased + got;
      end loop;
      if leased = 0 then
        perform set_config('synchronous_commit', 'off', true);
      end if;
    end
    $$`.execute(db);
}
