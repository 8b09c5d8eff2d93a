import { sql, type Kysely } from "kysely";
import type { Database } from "../../src/store/schema.js";

/**
 * Puts `count` queued no-op jobs straight into the jobs table, in one
 * statement: the columns of the jobs table (src/store/schema.sql),
 * as enqueueJob would write them. Enqueueing 1,000,000 jobs through the API
 * would measure the enqueue, not the claim. created_at is spread by a
 * microsecond per job so the claim order (priority, created_at, id) is the
 * insertion order, as it is for jobs enqueued one by one. Ends with ANALYZE,
 * as autovacuum would after a load this size.
 */
export async function bulkInsertJobs(
  db: Kysely<Database>,
  count: number,
  workspaceId: string,
): Promise<void> {
  await sql`
    insert into jobs (id, workspace_id, labels, kind, spec, state, priority, attempts, max_attempts,
      request_sha256, created_at, updated_at)
    select gen_random_uuid(), ${workspaceId}, array['linux'], 'command', '{"image":"busybox","argv":["true"]}'::jsonb,
           'queued', 0, 0, 3, 'bench', t, t
    from (select now() - interval '1 hour' + i * interval '1 microsecond' as t from
      generate_series(1, ${count}::int) i) s`.execute(db);
  await sql`analyze jobs`.execute(db);
}

/** Jobs by state, to check a run did what it claims. */
export async function jobStates(db: Kysely<Database>): Promise<Record<string, number>> {
  const { rows } = await sql<{
    state: string;
    n: number;
  }>`select state, count(*)::int as n from jobs group by state`.execute(db);
  return Object.fromEntries(rows.map((r) => [r.state, r.n]));
}
