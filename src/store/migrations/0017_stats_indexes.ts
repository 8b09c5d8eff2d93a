import { sql, type Kysely } from "kysely";

/**
 * Indexes for the operator's view (measured in docs/performance.md, "Stats"
 * and "Job history"): stats select jobs by when they settled, overall or in
 * one workspace; a workspace's job history is listed by creation in either
 * order, optionally in some states; the history of a runner probes its
 * leases. leases(job_id) exists since 0002; stats read its
 * columns from a covering index.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`create index jobs_settled on jobs (settled_at) where settled_at is not null`.execute(
    db,
  );
  await sql`create index jobs_workspace_settled on jobs (workspace_id, settled_at) where settled_at is not null`.execute(
    db,
  );
  await sql`create index jobs_workspace_created on jobs (workspace_id, created_at, id)`.execute(db);
  await sql`create index jobs_workspace_state_created on jobs (workspace_id, state, created_at, id)`.execute(
    db,
  );
  await sql`create index leases_runner_job on leases (runner_id, job_id)`.execute(db);
  // The stats statement reads a window's leases by job from this index alone (an index-only scan
  // once vacuum has marked the pages all-visible), not the leases heap.
  await sql`create index leases_job_stats on leases (job_id) include (runner_id, issued_at, expires_at, ended_at, end_reason)`.execute(
    db,
  );
}
