import { sql, type Kysely } from "kysely";

/**
 * forelead_claim plans each of its statements once per connection, and its
 * candidate search reads jobs_claimable in the index's order.
 *
 * Left to plan_cache_mode = auto, Postgres chose a custom plan for the
 * candidate search (`select ... from jobs j where j.workspace_id =
 * p_workspace_ids[i] and j.state = 'queued' ... order by j.priority desc,
 * j.created_at, j.id limit 1 for update skip locked`) and planned it on every
 * call: in a lease-throughput run with pg_stat_statements (track all,
 * track_planning on), 1,042 ms of planning against 242 ms of execution for
 * 6,048 searches. Its generic plan, estimated with no values, took the label
 * and requirement filters for one row and chose a sequential scan and a sort
 * (3.8 ms a search). With sequential scans and sorts priced out inside the
 * function, the generic plan is the custom plans' own: an index scan of
 * jobs_claimable in its order, the other predicates as a filter, stopping at
 * the first row it can lock. Every other statement of the function already
 * reads by an index (runners and workspace_pauses by their keys, the leases of a
 * runner by leases_open_by_runner, running groups by jobs_running_group) or
 * writes. Measured in docs/performance.md ("Fewer round trips per job") and
 * section 5 (flat at 1,000,000 queued). A later `create or replace function
 * forelead_claim` replaces these settings with its own: repeat them there.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`alter function forelead_claim(text[], text[], text[], int)
    set plan_cache_mode = force_generic_plan
    set enable_seqscan = off
    set enable_sort = off`.execute(db);
}
