import { sql, type Kysely } from "kysely";
import type { Database } from "../store/schema.js";
import { settleEach } from "./batcher.js";
import { jobSnapshot, type JobRow, type JobSnapshot } from "./job-snapshot.js";
import type { LeaseHolder } from "./lease-check.js";
import { checkCompletion, claimJob, claimLeases, completeJob, type CheckedCompletion, type CompletionInput, type LeaseView } from "./leases.js";
import { jobsChannel } from "./wakeups.js";

// Claims and completions that arrive together are served by one transaction:
// each commit waits for a WAL flush, and one flush (and one round trip per
// statement) for many requests is what lets the broker pass the rate of
// separate commits (docs/performance.md). A batch of one takes the
// single-request path (claimJob, completeJob), so an idle control plane
// behaves exactly as before; anything a batch cannot settle on its happy
// path goes through the single-request path too, after the batch commits.

/**
 * Claims for each holder: one call of claimLeases for the lot, or claimJob
 * one by one if that call fails (a runner in it is not registered, or a
 * deadlock), so each request gets its own answer or error.
 */
export async function claimBatch(db: Kysely<Database>, holders: readonly LeaseHolder[], leaseSeconds: number): Promise<Array<PromiseSettledResult<LeaseView | undefined>>> {
  if (holders.length > 1) {
    try {
      return (await claimLeases(db, holders, leaseSeconds)).map((value) => ({ status: "fulfilled", value }));
    } catch {
      // Rolled back whole: nothing was claimed.
    }
  }
  return settleEach(holders, (h) => claimJob(db, h, leaseSeconds));
}

/**
 * Settles many live leases in one transaction, as completeJob settles one.
 * Returns the reply for each completion it settled, undefined for the others
 * (not a live lease of that runner, already settled, or a second completion
 * of one job in the batch): those go through completeJob, which answers a
 * repeat with the stored reply and everything else with its precise error.
 */
export async function completeJobs(db: Kysely<Database>, items: ReadonlyArray<{ readonly input: CompletionInput; readonly checked: CheckedCompletion }>): Promise<Array<JobSnapshot | undefined>> {
  const hex = items.map((it) => it.checked.tokenHash.toString("hex"));
  return db.transaction().execute(async (tx) => {
    const { rows } = await sql<JobRow & { ord: number }>`
      update jobs set
        state = case
          when i.outcome = 'failed' and i.retryable and jobs.attempts < jobs.max_attempts and not jobs.cancel_requested then 'queued'
          else i.outcome end,
        exit_code = i.exit_code,
        error = i.error::jsonb,
        artifacts = case
          when i.outcome = 'failed' and i.retryable and jobs.attempts < jobs.max_attempts and not jobs.cancel_requested then null
          else i.artifacts::jsonb end,
        settled_at = case
          when i.outcome = 'failed' and i.retryable and jobs.attempts < jobs.max_attempts and not jobs.cancel_requested then null
          else now() end,
        runner_id = null, lease_id = null, lease_token_sha256 = null, lease_expires_at = null, updated_at = now()
      from unnest(
        ${items.map((_, i) => i)}::int[], ${items.map((it) => it.checked.jobId)}::uuid[], ${items.map((it) => it.input.workspaceId)}::text[],
        ${items.map((it) => it.input.runnerId)}::text[], ${hex}::text[], ${items.map((it) => it.checked.outcome)}::text[],
        ${items.map((it) => it.checked.error?.retryable ?? false)}::boolean[], ${items.map((it) => it.input.exitCode ?? null)}::int[],
        ${items.map((it) => (it.checked.error ? JSON.stringify(it.checked.error) : null))}::text[], ${items.map((it) => it.checked.artifacts)}::text[]
      ) as i(ord, job_id, workspace_id, runner_id, token_hex, outcome, retryable, exit_code, error, artifacts)
      where jobs.id = i.job_id and jobs.workspace_id = i.workspace_id and jobs.runner_id = i.runner_id
        and jobs.state = 'running' and jobs.lease_token_sha256 = decode(i.token_hex, 'hex') and jobs.lease_expires_at > now()
      returning jobs.*, i.ord`.execute(tx);
    const replies: Array<JobSnapshot | undefined> = items.map(() => undefined);
    if (rows.length === 0) return replies;
    for (const row of rows) replies[row.ord] = jobSnapshot(row);
    await sql`
      update leases set ended_at = now(), end_reason = i.end_reason, completion_id = i.completion_id, completion_sha256 = i.completion_sha256, completion_reply = i.reply::jsonb
      from unnest(${rows.map((r) => hex[r.ord]!)}::text[], ${rows.map((r) => (r.state === "queued" ? "requeued" : "settled"))}::text[],
        ${rows.map((r) => items[r.ord]!.input.completionId)}::text[], ${rows.map((r) => items[r.ord]!.checked.completionSha256)}::text[],
        ${rows.map((r) => JSON.stringify(replies[r.ord]))}::text[]) as i(token_hex, end_reason, completion_id, completion_sha256, reply)
      where leases.token_sha256 = decode(i.token_hex, 'hex')`.execute(tx);
    const requeued = [...new Set(rows.filter((r) => r.state === "queued").map((r) => r.workspace_id))];
    if (requeued.length > 0) await sql`select pg_notify(${jobsChannel}, w) from unnest(${requeued}::text[]) w`.execute(tx);
    return replies;
  });
}

/** Completes each input: checks first, one transaction for the valid ones, completeJob for whatever that left. */
export async function completeBatch(db: Kysely<Database>, inputs: readonly CompletionInput[]): Promise<Array<PromiseSettledResult<JobSnapshot>>> {
  if (inputs.length === 1) return settleEach(inputs, (input) => completeJob(db, input));
  const results: Array<PromiseSettledResult<JobSnapshot> | undefined> = inputs.map(() => undefined);
  const valid: Array<{ index: number; input: CompletionInput; checked: CheckedCompletion }> = [];
  inputs.forEach((input, index) => {
    try {
      valid.push({ index, input, checked: checkCompletion(input) });
    } catch (reason) {
      results[index] = { status: "rejected", reason };
    }
  });
  let replies: Array<JobSnapshot | undefined> = valid.map(() => undefined);
  if (valid.length > 1) {
    try {
      replies = await completeJobs(db, valid);
    } catch {
      // Rolled back (a deadlock between batches, say): each goes through completeJob below.
    }
  }
  valid.forEach((v, i) => {
    const reply = replies[i];
    if (reply) results[v.index] = { status: "fulfilled", value: reply };
  });
  const rest = valid.filter((v) => !results[v.index]);
  const settled = await settleEach(rest, (v) => completeJob(db, v.input));
  rest.forEach((v, i) => (results[v.index] = settled[i]));
  return results as Array<PromiseSettledResult<JobSnapshot>>;
}
