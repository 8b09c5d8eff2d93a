import { sql, type Kysely } from "kysely";

/**
 * Webhook subscriptions and their deliveries (src/webhooks). A subscription's secret is sealed
 * (src/secrets) and never stored plain. A delivery is made by the events trigger webhook_fanout
 * in the transaction that writes the event, and keeps its own copy of the event, so retention
 * never loses a pending or failed delivery. Deliveries are claimed with `for update skip locked`
 * and held by `locked_until`, so two replicas never send one delivery at once.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    create table webhook_subscriptions (
      id uuid primary key,
      workspace_id text,
      url text not null,
      events text[] not null,
      secret_sealed bytea not null,
      enabled boolean not null default true,
      disabled_reason text,
      failed_in_a_row integer not null default 0,
      created_at timestamptz not null default now(),
      created_by text not null
    )`.execute(db);
  await sql`
    create table webhook_deliveries (
      id uuid primary key default gen_random_uuid(),
      subscription_id uuid not null references webhook_subscriptions (id) on delete cascade,
      event_id bigint not null,
      event_type text not null,
      event_at timestamptz not null,
      workspace_id text,
      runner_id text,
      job_id uuid,
      data jsonb not null,
      status text not null default 'pending'
        check (status in ('pending', 'delivered', 'failed')),
      attempts integer not null default 0,
      created_at timestamptz not null default now(),
      first_attempt_at timestamptz,
      next_attempt_at timestamptz not null default now(),
      locked_until timestamptz,
      response_code integer,
      last_error text,
      finished_at timestamptz,
      tries jsonb not null default '[]'::jsonb,
      event_snapshot pg_snapshot not null,
      unique (subscription_id, event_id)
    )`.execute(db);
  await sql`
    create index webhook_deliveries_pending on webhook_deliveries (subscription_id, event_id)
    where status = 'pending'`.execute(db);
  await sql`
    create index webhook_deliveries_log on webhook_deliveries (subscription_id, created_at desc)
  `.execute(db);
  for (const statement of Object.values(functions)) await sql.raw(statement).execute(db);
  await sql`
    create trigger webhook_fanout after insert on events referencing new table as inserted
    for each statement execute function forelead_webhook_fanout()`.execute(db);
}

/**
 * Frozen copies of the functions' source files (src/store/sql/functions) as they are at this
 * migration, written by `npm run migration:new`: never edited.
 */
export const functions: Readonly<Record<string, string>> = {
  forelead_webhook_fanout: `create or replace function forelead_webhook_fanout()
returns trigger
language plpgsql volatile
as $$
begin
  insert into webhook_deliveries
    (subscription_id, event_id, event_type, event_at, workspace_id, runner_id, job_id, data,
      event_snapshot)
  select s.id, e.id, e.type, e.at, e.workspace_id, e.runner_id, e.job_id, e.data,
    pg_current_snapshot()
  from inserted e
  join webhook_subscriptions s on s.enabled
    and (s.workspace_id is null or s.workspace_id = e.workspace_id)
    and (e.type = any(s.events) or split_part(e.type, '.', 1) || '.*' = any(s.events)
      or '*' = any(s.events));
  return null;
end
$$;
`,
};
