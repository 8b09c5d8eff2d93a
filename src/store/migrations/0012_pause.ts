import { sql, type Kysely } from "kysely";

/**
 * Pause state (the operator view): a paused workspace's queued jobs are not
 * claimed, a paused runner gets no new lease; running jobs go on either way.
 * A row in workspace_pauses is a pause; resume deletes it. Both survive
 * restarts because they live here, not in a replica's memory.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    create table workspace_pauses (
      workspace_id text primary key,
      paused_at timestamptz not null default now(),
      paused_by text not null,
      reason text not null default ''
    )`.execute(db);
  await sql`alter table runners add column paused_at timestamptz, add column paused_by text`.execute(
    db,
  );
}
