import { sql, type Kysely } from "kysely";

/**
 * Events and logs. `stream_cursors` holds the last accepted sequence per
 * lease and stream: appending locks that row, so two requests on the same
 * lease and stream take turns and the sequence rule cannot race.
 * `stream_messages` keys every message by (job, stream, lease, sequence):
 * lease ids grow with each claim, so that key orders a job's stream across
 * attempts, and it can never hold a message twice.
 *
 * Neither table has foreign keys, on purpose. On stream_messages each would
 * cost an index probe per row on the hottest insert. On stream_cursors the
 * check would take a KEY SHARE lock on the lease row while the append holds
 * the job row: a completion locks the lease row and then the job row, so the
 * two could deadlock. The append statement only ever writes rows for the
 * live lease it has just found, and leases are never deleted.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable("stream_cursors")
    .addColumn("lease_id", "bigint", (c) => c.notNull())
    .addColumn("stream", "text", (c) => c.notNull().check(sql`stream in ('events', 'logs')`))
    .addColumn("last_sequence", "bigint", (c) => c.notNull())
    .addPrimaryKeyConstraint("stream_cursors_pkey", ["lease_id", "stream"])
    .execute();

  await db.schema
    .createTable("stream_messages")
    .addColumn("job_id", "uuid", (c) => c.notNull())
    .addColumn("stream", "text", (c) => c.notNull())
    .addColumn("lease_id", "bigint", (c) => c.notNull())
    .addColumn("attempt", "integer", (c) => c.notNull())
    .addColumn("sequence", "bigint", (c) => c.notNull())
    .addColumn("data", "jsonb", (c) => c.notNull())
    .addColumn("received_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .addPrimaryKeyConstraint("stream_messages_pkey", ["job_id", "stream", "lease_id", "sequence"])
    .execute();

  // Followers wait for a job to settle; every path that settles a job
  // (complete, cancel, release, expiry) goes through this update, so one
  // trigger wakes them without the broker knowing about streams.
  await sql`
    create function forelead_stream_job_settled() returns trigger language plpgsql as $$
    begin
      perform pg_notify('forelead_streams', 'settled:' || new.id::text);
      return null;
    end $$`.execute(db);
  await sql`
    create trigger jobs_settled_wakes_followers after update of state on jobs
    for each row when (old.state is distinct from new.state and new.state in ('succeeded', 'failed', 'cancelled'))
    execute function forelead_stream_job_settled()`.execute(db);
}
