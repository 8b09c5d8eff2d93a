import { Code, ConnectError } from "@connectrpc/connect";
import { sql, type Kysely } from "kysely";
import type { Database } from "../store/schema.js";
import { settleEach } from "./batcher.js";
import { hashLeaseToken, newLeaseToken } from "./ids.js";
import { jobSnapshot, leasedJobSnapshot, type JobRow, type JobSnapshot } from "./job-snapshot.js";
import type { LeaseHolder } from "./lease-check.js";
import { checkCompletion, claimJob, commitWithoutFlush, completeJob, type CheckedCompletion, type CompletionInput, type LeaseView } from "./leases.js";
import { jobsChannel } from "./wakeups.js";

// Claims and completions that arrive together are served by one transaction:
// each commit waits for a WAL flush, and one flush (and one round trip per
// statement) for many requests is what lets the broker pass the rate of
// separate commits (docs/performance.md). A batch of one takes the
// single-request path (claimJob, completeJob), so an idle control plane
// behaves exactly as before; anything a batch cannot settle on its happy
// path goes through the single-request path too, after the batch commits.

/**
 * Claims for several runners in one transaction, with the guarantees of
 * claimJob: every runner row is locked first (in key order, so batches on
 * different replicas cannot deadlock), then each group of runners with the
 * same workspace and labels takes jobs in one statement whose fresh snapshot
 * counts every committed live lease; a runner asking k times in one batch
 * gets at most slots - live of them.
 */
export async function claimJobs(db: Kysely<Database>, holders: readonly LeaseHolder[], leaseSeconds: number): Promise<Array<PromiseSettledResult<LeaseView | undefined>>> {
  const tokens = holders.map(() => newLeaseToken());
  const hashes = tokens.map((t) => hashLeaseToken(t).toString("hex"));
  const key = (workspaceId: string, runnerId: string) => `${workspaceId}\u0000${runnerId}`;
  const distinct = [...new Map(holders.map((h) => [key(h.workspaceId, h.runnerId), h])).values()];
  return db.transaction().execute(async (tx) => {
    const { rows: runners } = await sql<{ workspace_id: string; runner_id: string; slots: number; labels: string[] }>`
      update runners r set last_seen_at = now()
      from (
        select workspace_id, runner_id from runners
        where (workspace_id, runner_id) in (select * from unnest(${distinct.map((h) => h.workspaceId)}::text[], ${distinct.map((h) => h.runnerId)}::text[]))
          and retired_at is null
        order by workspace_id, runner_id
        for update
      ) locked
      where r.workspace_id = locked.workspace_id and r.runner_id = locked.runner_id
      returning r.workspace_id, r.runner_id, r.slots, r.labels`.execute(tx);
    const registered = new Map(runners.map((r) => [key(r.workspace_id, r.runner_id), r]));
    const results: Array<PromiseSettledResult<LeaseView | undefined>> = holders.map(() => ({ status: "fulfilled", value: undefined }));
    const groups = new Map<string, { workspaceId: string; labels: string[]; members: number[] }>();
    holders.forEach((h, i) => {
      const runner = registered.get(key(h.workspaceId, h.runnerId));
      if (!runner) {
        results[i] = { status: "rejected", reason: new ConnectError(`runner "${h.runnerId}" is not registered in workspace "${h.workspaceId}"; POST /v1/runner/register first`, Code.FailedPrecondition) };
        return;
      }
      const groupKey = `${h.workspaceId}\u0000${runner.labels.join("\u0000")}`;
      const group = groups.get(groupKey) ?? { workspaceId: h.workspaceId, labels: runner.labels, members: [] };
      group.members.push(i);
      groups.set(groupKey, group);
    });
    let leased = 0;
    for (const { workspaceId, labels, members } of groups.values()) {
      const runnerIds = members.map((i) => holders[i]!.runnerId);
      const slots = members.map((i) => registered.get(key(workspaceId, holders[i]!.runnerId))!.slots);
      // Request k (in arrival order) gets the k-th job in claim order; a request is
      // eligible only while its runner's live leases plus its earlier requests here fit its slots.
      const { rows } = await sql<JobRow>`
        with req as (
          select * from unnest(${runnerIds}::text[], ${members.map((i) => hashes[i]!)}::text[], ${members}::int[], ${slots}::int[]) as r(runner_id, token_hex, ord, slots)
        ), live as (
          select runner_id, count(*)::int as n from leases
          where workspace_id = ${workspaceId} and runner_id = any(${[...new Set(runnerIds)]}::text[]) and ended_at is null and expires_at > now()
          group by runner_id
        ), eligible as (
          select q.runner_id, q.token_hex, row_number() over (order by q.ord) as k
          from (select req.*, row_number() over (partition by req.runner_id order by req.ord) as rn from req) q
          left join live on live.runner_id = q.runner_id
          where coalesce(live.n, 0) + q.rn <= q.slots
        ), pick as (
          select p.id, p.attempts, row_number() over (order by p.priority desc, p.created_at, p.id) as k
          from (
            select j.id, j.attempts, j.priority, j.created_at from jobs j
            where j.workspace_id = ${workspaceId} and j.state = 'queued' and j.labels <@ ${labels}::text[]
            order by j.priority desc, j.created_at, j.id
            limit (select count(*) from eligible)
            for update of j skip locked
          ) p
        ), lease as (
          insert into leases (token_sha256, job_id, workspace_id, runner_id, attempt, expires_at)
          select decode(e.token_hex, 'hex'), pick.id, ${workspaceId}, e.runner_id, pick.attempts + 1, now() + make_interval(secs => ${leaseSeconds})
          from pick join eligible e on e.k = pick.k
          returning id, job_id, runner_id, token_sha256, attempt, expires_at
        )
        update jobs j set
          state = 'running', attempts = lease.attempt, runner_id = lease.runner_id, lease_id = lease.id,
          lease_token_sha256 = lease.token_sha256, lease_expires_at = lease.expires_at, updated_at = now()
        from lease where j.id = lease.job_id
        returning j.*`.execute(tx);
      // PGlite returns bytea as a Uint8Array, pg as a Buffer.
      const byHash = new Map(rows.map((row) => [Buffer.from(row.lease_token_sha256!).toString("hex"), row]));
      for (const i of members) {
        const row = byHash.get(hashes[i]!);
        if (row) results[i] = { status: "fulfilled", value: { token: tokens[i]!, expiresAt: row.lease_expires_at!, cancelRequested: row.cancel_requested, job: leasedJobSnapshot(row) } };
      }
      leased += rows.length;
    }
    if (leased === 0) await commitWithoutFlush(tx);
    return results;
  });
}

/** Claims for each holder: one transaction for the lot, or claimJob one by one if that transaction fails. */
export async function claimBatch(db: Kysely<Database>, holders: readonly LeaseHolder[], leaseSeconds: number): Promise<Array<PromiseSettledResult<LeaseView | undefined>>> {
  if (holders.length > 1) {
    try {
      return await claimJobs(db, holders, leaseSeconds);
    } catch {
      // A deadlock or serialization failure rolled the batch back: nothing was claimed.
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
