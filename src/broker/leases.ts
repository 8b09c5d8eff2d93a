import { Code, ConnectError } from "@connectrpc/connect";
import { sql, type Kysely } from "kysely";
import type { Database } from "../store/schema.js";
import { checkJobId, checkLeaseToken, hashLeaseToken, newLeaseToken } from "./ids.js";
import { jobSnapshot, leasedJobSnapshot, type JobRow, type JobSnapshot } from "./job-snapshot.js";
import { leaseRefusal, type LeaseHolder } from "./lease-check.js";
import { jobsChannel } from "./wakeups.js";

/** A lease as the runner sees it: the token only in the claim that issued it. */
export interface LeaseView {
  readonly token?: string;
  readonly expiresAt: Date;
  readonly cancelRequested: boolean;
  readonly job: JobSnapshot;
}

/**
 * Claims the highest-priority, oldest eligible job for a runner, or none.
 * One request of claimLeases: see there for the guarantees.
 */
export async function claimJob(db: Kysely<Database>, holder: LeaseHolder, leaseSeconds: number): Promise<LeaseView | undefined> {
  const [lease] = await claimLeases(db, [holder], leaseSeconds);
  return lease;
}

/**
 * Claims a job for each request, in one statement: the function
 * forelead_claim (migration 0008), which for each request in turn locks the
 * runner's row, counts its live leases with a fresh snapshot and takes the
 * highest-priority, oldest eligible job FOR UPDATE SKIP LOCKED. So a runner
 * never holds more than its slots, however its claims interleave (a runner
 * asking k times gets at most its free slots), and concurrent claims on any
 * replica never take the same job. Requests are sent sorted by workspace and
 * runner, so concurrent calls lock runner rows in one order. Answers in the
 * order of `holders`: the lease, or undefined when none was free. Throws
 * failed_precondition, claiming nothing, when a runner is not registered.
 */
export async function claimLeases(db: Kysely<Database>, holders: readonly LeaseHolder[], leaseSeconds: number): Promise<Array<LeaseView | undefined>> {
  const tokens = holders.map(() => newLeaseToken());
  const hashes = tokens.map((t) => hashLeaseToken(t).toString("hex"));
  const order = holders.map((_, i) => i).sort((x, y) => compareHolders(holders[x]!, holders[y]!) || x - y);
  let rows: JobRow[];
  try {
    ({ rows } = await sql<JobRow>`
      select * from forelead_claim(${order.map((i) => holders[i]!.workspaceId)}::text[], ${order.map((i) => holders[i]!.runnerId)}::text[],
        ${order.map((i) => hashes[i]!)}::text[], ${leaseSeconds}::int)`.execute(db));
  } catch (err) {
    // SQLSTATE FL001: raised by forelead_claim for a runner that is not registered (or retired).
    if ((err as { code?: string }).code === "FL001") throw new ConnectError((err as Error).message, Code.FailedPrecondition);
    throw err;
  }
  // PGlite returns bytea as a Uint8Array, pg as a Buffer.
  const byHash = new Map(rows.map((row) => [Buffer.from(row.lease_token_sha256!).toString("hex"), row]));
  return holders.map((_, i) => {
    const row = byHash.get(hashes[i]!);
    return row && { token: tokens[i]!, expiresAt: row.lease_expires_at!, cancelRequested: row.cancel_requested, job: leasedJobSnapshot(row) };
  });
}

function compareHolders(a: LeaseHolder, b: LeaseHolder): number {
  return a.workspaceId < b.workspaceId ? -1 : a.workspaceId > b.workspaceId ? 1 : a.runnerId < b.runnerId ? -1 : a.runnerId > b.runnerId ? 1 : 0;
}

/** The identity of a lease-scoped call. */
export interface LeaseCall extends LeaseHolder {
  readonly jobId: string;
  readonly leaseToken: string;
}

/** Extends a live lease to now + lease length; carries cancelRequested. */
export async function renewLease(db: Kysely<Database>, call: LeaseCall, leaseSeconds: number): Promise<LeaseView> {
  const jobId = checkJobId(call.jobId);
  const tokenHash = checkLeaseToken(call.leaseToken);
  const { rows } = await sql<JobRow>`
    with j as (
      update jobs set lease_expires_at = now() + make_interval(secs => ${leaseSeconds}), updated_at = now()
      where id = ${jobId} and workspace_id = ${call.workspaceId} and runner_id = ${call.runnerId}
        and state = 'running' and lease_token_sha256 = ${tokenHash} and lease_expires_at > now()
      returning *
    ), l as (
      update leases set expires_at = j.lease_expires_at from j where leases.id = j.lease_id
    )
    select * from j`.execute(db);
  const row = rows[0];
  if (!row) throw await leaseRefusal(db, call, jobId, tokenHash);
  return { expiresAt: row.lease_expires_at!, cancelRequested: row.cancel_requested, job: leasedJobSnapshot(row) };
}

/**
 * Gives a live lease back: the job is queued again at once, without charging
 * the attempt. A job whose cancel was requested is settled as cancelled.
 */
export async function releaseLease(db: Kysely<Database>, call: LeaseCall): Promise<void> {
  const jobId = checkJobId(call.jobId);
  const tokenHash = checkLeaseToken(call.leaseToken);
  const { rows } = await sql<JobRow>`
    with j as (
      update jobs set
        state = case when cancel_requested then 'cancelled' else 'queued' end,
        attempts = case when cancel_requested then attempts else attempts - 1 end,
        settled_at = case when cancel_requested then now() end,
        failure_reason = case when cancel_requested then 'cancelled' end,
        failure_message = case when cancel_requested then 'cancelled; the runner released the lease' end,
        runner_id = null, lease_id = null, lease_token_sha256 = null, lease_expires_at = null, updated_at = now()
      where id = ${jobId} and workspace_id = ${call.workspaceId} and runner_id = ${call.runnerId}
        and state = 'running' and lease_token_sha256 = ${tokenHash} and lease_expires_at > now()
      returning *
    ), l as (
      update leases set ended_at = now(), end_reason = 'released', expires_at = least(expires_at, now())
      where token_sha256 = ${tokenHash} and exists (select 1 from j)
    ), wake as (
      select pg_notify(${jobsChannel}, ${call.workspaceId}) from j where j.state = 'queued'
    )
    select j.*, (select count(*) from wake) as woken from j`.execute(db);
  if (!rows[0]) throw await leaseRefusal(db, call, jobId, tokenHash);
}

/** Runner-reported outcomes. */
export const outcomes = ["succeeded", "failed", "cancelled"] as const;
export type Outcome = (typeof outcomes)[number];

/** A completion, as the runner sent it. */
export interface CompletionInput extends LeaseCall {
  readonly completionId: string;
  readonly outcome: string;
  readonly exitCode: number | undefined;
  readonly error: { readonly code: string; readonly message: string; readonly retryable: boolean } | undefined;
  /**
   * The result manifest, already checked by src/artifacts (manifest.ts):
   * digests finalized under this job's leases. Recorded when the job settles.
   */
  readonly artifacts?: readonly ResultArtifact[];
}

/** One entry of a completion's result manifest. */
export interface ResultArtifact {
  readonly name: string;
  readonly digest: string;
  readonly size: number;
  readonly mediaType: string;
}

/** A completion after its checks: what the statements need. */
export interface CheckedCompletion {
  readonly jobId: string;
  readonly tokenHash: Buffer;
  readonly outcome: Outcome;
  readonly error: { readonly code: string; readonly message: string; readonly retryable: boolean } | undefined;
  /** The result manifest as stored JSON, or null when there is none. */
  readonly artifacts: string | null;
  /** Identifies the body, so a repeat with a different body is told apart. */
  readonly completionSha256: string;
}

/** Checks a completion's fields (400 naming the bad one); shared by completeJob and completeBatch. */
export function checkCompletion(input: CompletionInput): CheckedCompletion {
  const jobId = checkJobId(input.jobId);
  const tokenHash = checkLeaseToken(input.leaseToken);
  if (!input.completionId) throw new ConnectError("completionId is required: an id the runner picks, so a retried completion is recognised", Code.InvalidArgument);
  if (input.completionId.length > 200) throw new ConnectError("completionId is longer than 200 characters", Code.InvalidArgument);
  if (!outcomes.includes(input.outcome as Outcome)) {
    throw new ConnectError(`outcome ${JSON.stringify(input.outcome)} is not one of ${outcomes.join(", ")}`, Code.InvalidArgument);
  }
  const outcome = input.outcome as Outcome;
  const error = input.error && (input.error.code || input.error.message) ? { code: input.error.code, message: input.error.message.slice(0, 4096), retryable: input.error.retryable } : undefined;
  const artifacts = input.artifacts?.length ? JSON.stringify(input.artifacts.map((a) => ({ name: a.name, digest: a.digest, size: a.size, mediaType: a.mediaType }))) : null;
  const completionSha256 = hashLeaseToken(JSON.stringify([outcome, input.exitCode ?? null, error ?? null, ...(artifacts ? [artifacts] : [])])).toString("hex");
  return { jobId, tokenHash, outcome, error, artifacts, completionSha256 };
}

/**
 * Settles a job under its live lease. Idempotent: the same completionId with
 * the same body on the same lease returns the reply stored the first time,
 * even after the lease ended. A different completion after the lease ended is
 * refused (409). A failure marked retryable requeues the job while attempts
 * remain (unless a cancel was requested).
 *
 * The usual case (a live lease, first completion) is one statement
 * (settleLeases); anything else is told apart by completeJobInTransaction.
 */
export async function completeJob(db: Kysely<Database>, input: CompletionInput): Promise<JobSnapshot> {
  const checked = checkCompletion(input);
  const [reply] = await settleLeases(db, [{ input, checked }]);
  return reply ?? completeJobInTransaction(db, input, checked);
}

/** A completion with its checked fields, as settleLeases takes it. */
export interface CheckedItem {
  readonly input: CompletionInput;
  readonly checked: CheckedCompletion;
}

/**
 * Settles the live leases among `items` in one statement (one round trip, one
 * commit): the job rows, the lease rows (ended, with the completion id, hash
 * and the settled job row as the stored reply) and the wakeup for requeued
 * jobs. Returns the reply of each completion it settled, undefined for the
 * others (not a live lease of that runner, already settled, or a second
 * completion of one job in the same call): completeJobInTransaction answers
 * those, a repeat with the stored reply and everything else with its error.
 */
export async function settleLeases(db: Kysely<Database>, items: readonly CheckedItem[]): Promise<Array<JobSnapshot | undefined>> {
  const { rows } = await sql<JobRow & { ord: number }>`
    with j as (
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
        ${items.map((it) => it.input.runnerId)}::text[], ${items.map((it) => it.checked.tokenHash.toString("hex"))}::text[], ${items.map((it) => it.checked.outcome)}::text[],
        ${items.map((it) => it.checked.error?.retryable ?? false)}::boolean[], ${items.map((it) => it.input.exitCode ?? null)}::int[],
        ${items.map((it) => (it.checked.error ? JSON.stringify(it.checked.error) : null))}::text[], ${items.map((it) => it.checked.artifacts)}::text[],
        ${items.map((it) => it.input.completionId)}::text[], ${items.map((it) => it.checked.completionSha256)}::text[]
      ) as i(ord, job_id, workspace_id, runner_id, token_hex, outcome, retryable, exit_code, error, artifacts, completion_id, completion_sha256)
      where jobs.id = i.job_id and jobs.workspace_id = i.workspace_id and jobs.runner_id = i.runner_id
        and jobs.state = 'running' and jobs.lease_token_sha256 = decode(i.token_hex, 'hex') and jobs.lease_expires_at > now()
      returning jobs.*, to_jsonb(jobs.*) as reply_row, i.ord, i.token_hex, i.completion_id as settled_by, i.completion_sha256 as settled_sha256
    ), l as (
      update leases set ended_at = now(), end_reason = case when j.state = 'queued' then 'requeued' else 'settled' end,
        completion_id = j.settled_by, completion_sha256 = j.settled_sha256, completion_reply = j.reply_row
      from j where leases.token_sha256 = decode(j.token_hex, 'hex')
    ), wake as (
      select pg_notify(${jobsChannel}, q.w) from (select distinct workspace_id as w from j where state = 'queued') q
    )
    select j.*, (select count(*) from wake) as woken from j`.execute(db);
  const replies: Array<JobSnapshot | undefined> = items.map(() => undefined);
  for (const row of rows) replies[row.ord] = jobSnapshot(row);
  return replies;
}

/**
 * completeJob for a completion settleLeases did not settle: in a transaction
 * holding the lease row, a repeat gets the stored reply, a different
 * completion 409, a settled job or a dead lease its refusal (and a lease
 * found live after all is settled by settleLeases under the lock).
 */
export async function completeJobInTransaction(db: Kysely<Database>, input: CompletionInput, checked: CheckedCompletion): Promise<JobSnapshot> {
  const { jobId, tokenHash, completionSha256 } = checked;
  return db.transaction().execute(async (tx) => {
    const lease = await tx.selectFrom("leases").selectAll().where("token_sha256", "=", tokenHash).where("job_id", "=", jobId).where("runner_id", "=", input.runnerId).where("workspace_id", "=", input.workspaceId).forUpdate().executeTakeFirst();
    if (lease?.completion_id) {
      if (lease.completion_id === input.completionId && lease.completion_sha256 === completionSha256) return storedReply(tx, lease.id);
      throw new ConnectError(`job ${jobId} was already completed under this lease by completion ${JSON.stringify(lease.completion_id)}; a different completion is refused`, Code.Aborted);
    }
    // Not completed under this lease: settle it here if it is live after all (the lock is now held),
    // else say why it cannot be.
    const [reply] = await settleLeases(tx, [{ input, checked }]);
    if (reply) return reply;
    const settled = await tx.selectFrom("jobs").select(["state"]).where("id", "=", jobId).where("workspace_id", "=", input.workspaceId).executeTakeFirst();
    if (settled && ["succeeded", "failed", "cancelled"].includes(settled.state)) {
      throw new ConnectError(`job ${jobId} is already ${settled.state}; a different completion is refused`, Code.Aborted);
    }
    throw await leaseRefusal(tx, input, jobId, tokenHash);
  });
}

/**
 * The reply stored with a completion: the job row as it was settled (stored
 * as jsonb, read back as a row of jobs), so a repeat gets the same view.
 */
async function storedReply(db: Kysely<Database>, leaseId: number): Promise<JobSnapshot> {
  const { rows } = await sql<JobRow>`select r.* from leases l cross join lateral jsonb_populate_record(null::jobs, l.completion_reply) r where l.id = ${leaseId}`.execute(db);
  return jobSnapshot(rows[0]!);
}

/**
 * Ends expired leases: each job goes back to the queue while attempts
 * remain, is failed with reason lease_lost when none remain, and is settled
 * as cancelled when a cancel was requested. Returns the jobs it changed.
 * Bounded per call, and SKIP LOCKED, so replicas sweep side by side.
 */
export async function expireLeases(db: Kysely<Database>, limit = 500): Promise<Array<{ id: string; state: string }>> {
  const { rows } = await sql<{ id: string; state: string; workspace_id: string }>`
    with expired as (
      select id, lease_id, lease_expires_at from jobs
      where state = 'running' and lease_expires_at <= now()
      order by lease_expires_at
      limit ${limit}
      for update skip locked
    ), j as (
      update jobs set
        state = case when jobs.cancel_requested then 'cancelled' when jobs.attempts >= jobs.max_attempts then 'failed' else 'queued' end,
        failure_reason = case when jobs.cancel_requested then 'cancelled' when jobs.attempts >= jobs.max_attempts then 'lease_lost' end,
        failure_message = case
          when jobs.cancel_requested then 'cancelled; the lease expired at ' || to_char(expired.lease_expires_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') || ' without the runner settling the job'
          when jobs.attempts >= jobs.max_attempts then 'the lease expired at ' || to_char(expired.lease_expires_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') || ' on attempt ' || jobs.attempts || ' of ' || jobs.max_attempts || '; no attempts left'
        end,
        settled_at = case when jobs.cancel_requested or jobs.attempts >= jobs.max_attempts then now() end,
        runner_id = null, lease_id = null, lease_token_sha256 = null, lease_expires_at = null, updated_at = now()
      from expired where jobs.id = expired.id
      returning jobs.id, jobs.state, jobs.workspace_id, expired.lease_id
    ), l as (
      update leases set ended_at = now(), end_reason = 'expired' from j where leases.id = j.lease_id
    ), wake as (
      select pg_notify(${jobsChannel}, w) from (select distinct workspace_id as w from j where state = 'queued') q
    )
    select j.id, j.state, j.workspace_id, (select count(*) from wake) as woken from j`.execute(db);
  return rows.map((r) => ({ id: r.id, state: r.state }));
}
