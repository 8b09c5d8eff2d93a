import { sql, type Kysely } from "kysely";

/**
 * One row per running `forelead serve` (a replica): inserted at start,
 * last_seen_at moved by its heartbeat, deleted at a clean stop. A replica
 * that died leaves a row whose last_seen_at stops moving: status lists only
 * rows seen recently, and the heartbeat prunes old ones.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    create table replicas (
      id text primary key,
      host text not null,
      pid integer not null,
      version text not null,
      started_at timestamptz not null default now(),
      last_seen_at timestamptz not null default now()
    )`.execute(db);
}
