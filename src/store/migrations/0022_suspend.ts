import { sql, type Kysely } from "kysely";

/**
 * Suspend and answer (docs/suspend.md). A job that asked for input waits in
 * the new state `waiting_input`; the lease that suspended it ends with
 * reason `suspended`. `job_inputs` holds each input request, one per
 * suspending lease (the lease id is the key, so a repeated suspend under one
 * lease finds its row), with the checkpoint manifest and, once given, the
 * answer. `jobs.input_lease_id` names the job's latest request: shown on the
 * job, and delivered with every later lease until the job suspends again.
 * job_inputs_unanswered is what the expiry sweep searches.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`alter table jobs drop constraint jobs_state_check`.execute(db);
  await sql`alter table jobs add constraint jobs_state_check check (state in ('queued', 'running', 'waiting_input', 'succeeded', 'failed', 'cancelled'))`.execute(
    db,
  );
  await sql`alter table leases drop constraint leases_end_reason_check`.execute(db);
  await sql`alter table leases add constraint leases_end_reason_check check (end_reason in ('released', 'expired', 'settled', 'requeued', 'timed_out', 'suspended'))`.execute(
    db,
  );
  await sql`alter table jobs add column input_lease_id bigint`.execute(db);
  await sql`
    create table job_inputs (
      lease_id bigint primary key,
      job_id uuid not null references jobs (id),
      request_id text not null,
      prompt text not null,
      schema jsonb not null,
      expires_at timestamptz not null,
      checkpoint jsonb not null,
      suspend_sha256 text not null,
      created_at timestamptz not null default now(),
      answer jsonb,
      answered_at timestamptz,
      answered_by text
    )`.execute(db);
  await sql`create index job_inputs_job on job_inputs (job_id)`.execute(db);
  // What the waiting_input gauge counts per workspace (src/server/metrics/database-sample.ts).
  await sql`create index jobs_waiting_input on jobs (workspace_id) where state = 'waiting_input'`.execute(
    db,
  );
  await sql`create index job_inputs_unanswered on job_inputs (expires_at) where answered_at is null`.execute(
    db,
  );
}
