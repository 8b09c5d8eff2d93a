import { sql, type Kysely } from "kysely";
import type { Database } from "../store/schema.js";
import { cutoff } from "./retention-kinds.js";

/**
 * Deletes settled pipelines whose settling is past the retention (their steps and step secrets go
 * with them by cascade), at most `batch`; their jobs are then ordinary settled jobs, pruned by
 * pruneJobs, since each settled before its pipeline did.
 */
async function prunePipelines(db: Kysely<Database>, retentionMs: number, batch: number) {
  const { numAffectedRows } = await sql`delete from pipelines where id = any(array(
    select id from pipelines where settled_at < ${cutoff(retentionMs)}
    order by settled_at limit ${batch} for update skip locked))`.execute(db);
  return Number(numAffectedRows ?? 0);
}

/**
 * Deletes at most `batch` retry chains of settled jobs past the retention, in one transaction,
 * with everything that hangs off them: leases and their stream cursors, log and event lines
 * (samples among them), peaks, uploads and their chunks, inputs, secrets. Returns jobs and
 * pipelines deleted.
 *
 * A chain is picked by its newest job (retried_by null), settled before the cutoff and not a step
 * of a pipeline still kept; its older jobs settled before it and go with it, so a job a kept job
 * names (retry_of) is never deleted, and a chain holding a step of a kept pipeline is kept. Heads are locked FOR UPDATE SKIP LOCKED: replicas pruning
 * at once take different chains, a retry of a job being pruned waits for the prune and then finds
 * no job, and a claim never meets these rows (they are settled). Blobs the jobs' manifests named
 * are left to the artifact garbage collector.
 */
export async function pruneJobs(
  db: Kysely<Database>,
  retentionMs: number,
  batch: number,
): Promise<number> {
  const pipelines = await prunePipelines(db, retentionMs, batch);
  const jobs = await db.transaction().execute(async (tx) => {
    const { rows } = await sql<{ id: string }>`with recursive heads as (
        select j.id from jobs j
        where j.settled_at < ${cutoff(retentionMs)} and j.retried_by is null
          and not exists (select 1 from pipeline_steps s where s.job_id = j.id)
        order by j.settled_at limit ${batch} for update of j skip locked),
      chain(head, id) as (select id, id from heads
        union select c.head, j.retry_of from jobs j join chain c on j.id = c.id
          where j.retry_of is not null),
      kept as (select c.head from chain c join pipeline_steps s on s.job_id = c.id)
      select id::text as id from chain where head not in (select head from kept)`.execute(tx);
    if (rows.length === 0) return 0;
    const ids = rows.map((r) => r.id);
    const byJob = sql`any(${ids}::uuid[])`;
    await sql`delete from stream_cursors where lease_id in (
      select id from leases where job_id = ${byJob})`.execute(tx);
    await sql`delete from upload_chunks where upload_id in (
      select id from uploads where job_id = ${byJob})`.execute(tx);
    await sql`delete from uploads where job_id = ${byJob}`.execute(tx);
    await sql`delete from job_inputs where job_id = ${byJob}`.execute(tx);
    await sql`delete from leases where job_id = ${byJob}`.execute(tx);
    await sql`delete from stream_messages where job_id = ${byJob}`.execute(tx);
    await sql`delete from job_peaks where job_id = ${byJob}`.execute(tx);
    await sql`delete from job_secrets where job_id = ${byJob}`.execute(tx);
    const { numAffectedRows } = await sql`delete from jobs where id = ${byJob}`.execute(tx);
    return Number(numAffectedRows ?? 0);
  });
  return pipelines + jobs;
}
