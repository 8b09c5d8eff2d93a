import { sql, type Kysely } from "kysely";

/**
 * Autoscaling: scaling_groups, the groups autoscale controllers register, each held by one
 * controller instance under a lease (a second controller is refused while the lease is live; a
 * dead controller's groups are taken over after it); runners.drain_ordered_by, who ordered the
 * runner to drain (POST /v1/admin/runners/{runnerId}/drain).
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
export const functions: Readonly<Record<string, string>> = {};
