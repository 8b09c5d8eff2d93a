import { sql, type Kysely } from "kysely";
import type { Database } from "../../src/store/schema.js";

/**
 * Puts `count` queued no-op jobs straight into the jobs table, in one
 * statement: the columns of the jobs table (src/store/schema.sql),
 * as enqueueJob would write them. Enqueueing 1,000,000 jobs through the API
 * would measure the enqueue, not the claim. created_at is spread by a
 * microsecond per job so the claim order (priority, created_at, id) is the
 * insertion order, as it is for jobs enqueued one by one. With `fairnessKeys`
 * the jobs are spread round-robin over that many fairness keys of weight 1,
 * each with the share tag forelead_fair_tag gives a job enqueued so (the
 * i-th job of a key: i), written directly rather than by the trigger, and
 * each key's row in fairness_keys. Ends with ANALYZE, as autovacuum would
 * after a load this size.
 */
export async function bulkInsertJobs(
  db: Kysely<Database>,
  count: number,
  workspaceId: string,
  fairnessKeys = 0,
): Promise<void> {
  const keys = fairnessKeys;
  if (keys > 0) await sql`alter table jobs disable trigger jobs_fair_tag`.execute(db);
  await sql`
    insert into jobs (id, workspace_id, labels, kind, spec, state, priority, attempts, max_attempts,
      request_sha256, created_at, updated_at, fairness_key, fair_tag)
    select gen_random_uuid(), ${workspaceId}, array['linux'], 'command', '{"image":"busybox","argv":["true"]}'::jsonb,
           'queued', 0, 0, 3, 'bench', t, t,
           case when ${keys}::int > 0 then 'k' || (i % ${keys}::int) end,
           case when ${keys}::int > 0 then (i / ${keys}::int + 1)::float8 end
    from (select i, now() - interval '1 hour' + i * interval '1 microsecond' as t from
      generate_series(1, ${count}::int) i) s`.execute(db);
  if (keys > 0) {
    await sql`alter table jobs enable trigger jobs_fair_tag`.execute(db);
    await sql`insert into fairness_keys (workspace_id, fairness_key, last_tag)
      select ${workspaceId}, 'k' || k, ceil(${count}::float8 / ${keys}::int)
      from generate_series(0, ${keys}::int - 1) k`.execute(db);
  }
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
