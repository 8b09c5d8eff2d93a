import { sql, type Kysely } from "kysely";

/**
 * Pipelines (src/broker/pipelines/): a step graph the control plane
 * sequences. A pipeline row is locked FOR UPDATE by every transaction that
 * moves one of its steps (the settle of a step's job, a cancel, a resume), so
 * two replicas settling two steps of one pipeline at once take turns and the
 * second sees the first's transitions: no step is started twice or forgotten.
 *
 * A step's `request` is its job fields as validated at submit (secrets
 * apart, sealed in pipeline_step_secrets bound to the step); its job is
 * enqueued from it when its needs are met. `job_id` is the step's current job
 * (a resume gives it a new one); `attempts` counts the jobs it was given.
 *
 * jobs.retry_of / retried_by link a retried job and its retry (POST
 * /v1/admin/jobs/{jobId}/retry); retried_by is set once, in the retry's
 * transaction, so a job has at most one retry.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    create table pipelines (
      id uuid primary key,
      workspace_id text not null,
      name text not null,
      idempotency_key text,
      request_sha256 text not null,
      state text not null check (state in ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
      cancel_requested boolean not null default false,
      enqueued_by text,
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now(),
      settled_at timestamptz,
      unique (workspace_id, idempotency_key)
    )`.execute(db);
  await sql`create index pipelines_workspace_created on pipelines (workspace_id, created_at, id)`.execute(
    db,
  );
  await sql`create index pipelines_workspace_state_created on pipelines (workspace_id, state, created_at, id)`.execute(
    db,
  );
  await sql`
    create table pipeline_steps (
      pipeline_id uuid not null references pipelines (id) on delete cascade,
      name text not null,
      ord integer not null,
      needs text[] not null default '{}',
      allow_failure boolean not null default false,
      inputs jsonb not null default '[]',
      request jsonb not null,
      state text not null check (state in ('pending', 'queued', 'running', 'succeeded', 'failed', 'skipped', 'cancelled')),
      job_id uuid references jobs (id),
      attempts integer not null default 0,
      updated_at timestamptz not null default now(),
      primary key (pipeline_id, name)
    )`.execute(db);
  // The settle of a job finds its step by this index (one probe per settled job).
  await sql`create unique index pipeline_steps_job on pipeline_steps (job_id) where job_id is not null`.execute(
    db,
  );
  await sql`
    create table pipeline_step_secrets (
      pipeline_id uuid not null,
      step text not null,
      kind text not null check (kind in ('env', 'file')),
      name text not null,
      sealed bytea not null,
      primary key (pipeline_id, step, kind, name),
      foreign key (pipeline_id, step) references pipeline_steps (pipeline_id, name) on delete cascade
    )`.execute(db);
  await sql`alter table jobs add column retry_of uuid references jobs (id), add column retried_by uuid references jobs (id)`.execute(
    db,
  );
}
