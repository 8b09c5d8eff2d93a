import { sql, type Kysely } from "kysely";

/**
 * Schedules: a cron expression in a time zone and the job or pipeline each due time starts.
 * `schedule_fires` holds one row per (schedule, due time): its primary key makes a due time fire
 * at most once whichever replica reaches it, and the row is written in the transaction of the
 * enqueue it records. `schedule_secrets` holds a template's secrets sealed, bound to the
 * schedule, step, kind and name (src/secrets/bindings.ts). The partial index serves the ticker's
 * search for due, unpaused schedules.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    create table schedules (
      id uuid primary key,
      workspace_id text not null,
      name text not null,
      cron text not null,
      time_zone text not null,
      template_kind text not null check (template_kind in ('job', 'pipeline')),
      template jsonb not null,
      missed_runs text not null check (missed_runs in ('skip', 'runOnce', 'all')),
      overlap text not null check (overlap in ('allow', 'skip', 'cancelPrevious')),
      next_run_at timestamptz not null,
      paused_at timestamptz,
      paused_by text,
      created_by text,
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now(),
      unique (workspace_id, name)
    )
  `.execute(db);
  await sql`
    create index schedules_due on schedules (next_run_at) where paused_at is null
  `.execute(db);
  await sql`
    create table schedule_fires (
      schedule_id uuid not null references schedules (id) on delete cascade,
      due_at timestamptz not null,
      fired_at timestamptz not null default now(),
      cause text not null check (cause in ('due', 'missed', 'manual')),
      outcome text not null
        check (outcome in ('enqueued', 'skipped_missed', 'skipped_overlap', 'failed')),
      job_id uuid,
      pipeline_id uuid,
      cancelled_id uuid,
      idempotency_key text,
      error text,
      primary key (schedule_id, due_at)
    )
  `.execute(db);
  await sql`
    create table schedule_secrets (
      schedule_id uuid not null references schedules (id) on delete cascade,
      step text not null,
      kind text not null check (kind in ('env', 'file')),
      name text not null,
      sealed bytea not null,
      primary key (schedule_id, step, kind, name)
    )
  `.execute(db);
}
