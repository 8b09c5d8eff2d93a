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
 *
 * Two statements in one transaction. The first updates the runner's row
 * (last seen), which also locks it: claims by the same runner queue behind
 * each other, so the live-lease count in the second cannot be stale and the
 * runner never holds more than its slots. Claims by different runners never
 * wait for each other. The second statement picks with FOR UPDATE SKIP
 * LOCKED, so concurrent claims (on any replica) never take the same job.
 */
export async function claimJob(db: Kysely<Database>, holder: LeaseHolder, leaseSeconds: number): Promise<LeaseView | undefined> {
  const token = newLeaseToken();
  const tokenHash = hashLeaseToken(token);
  const row = await db.transaction().execute(async (tx) => {
    const runner = await tx
      .updateTable("runners")
      .set({ last_seen_at: sql`now()` })
      .where("workspace_id", "=", holder.workspaceId)
      .where("runner_id", "=", holder.runnerId)
      .where("retired_at", "is", null)
      .returning(["slots", "labels"])
      .executeTakeFirst();
    if (!runner) {
      throw new ConnectError(`runner "${holder.runnerId}" is not registered in workspace "${holder.workspaceId}"; POST /v1/runner/register first`, Code.FailedPrecondition);
    }
    const { rows } = await sql<JobRow>`
      with live as (
        select count(*)::int as n from leases
        where workspace_id = ${holder.workspaceId} and runner_id = ${holder.runnerId}
          and ended_at is null and expires_at > now()
      ), pick as (
        select j.id, j.attempts from jobs j
        where j.workspace_id = ${holder.workspaceId} and j.state = 'queued'
          and j.labels <@ ${runner.labels}::text[]
          and (select n from live) < ${runner.slots}
        order by j.priority desc, j.created_at, j.id
        limit 1
        for update of j skip locked
      ), lease as (
        insert into leases (token_sha256, job_id, workspace_id, runner_id, attempt, expires_at)
        select ${tokenHash}, pick.id, ${holder.workspaceId}, ${holder.runnerId}, pick.attempts + 1, now() + make_interval(secs => ${leaseSeconds})
        from pick
        returning id, job_id, attempt, expires_at
      )
      update jobs j set
        state = 'running', attempts = lease.attempt, runner_id = ${holder.runnerId}, lease_id = lease.id,
        lease_token_sha256 = ${tokenHash}, lease_expires_at = lease.expires_at, updated_at = now()
      from lease where j.id = lease.job_id
      returning j.*`.execute(tx);
    if (!rows[0]) await commitWithoutFlush(tx);
    return rows[0];
  });
  if (!row) return undefined;
  return { token, expiresAt: row.lease_expires_at!, cancelRequested: row.cancel_requested, job: leasedJobSnapshot(row) };
}

/**
 * A claim that leased nothing changed only the runner's last_seen_at: its
 * commit need not wait for the WAL flush (losing that timestamp in a crash is
 * harmless). Idle runners polling, and every long-poll that waits, then cost
 * the database no flush; a claim that leases a job still commits durably.
 */
export async function commitWithoutFlush(tx: Kysely<Database>): Promise<void> {
  await sql`select set_config('synchronous_commit', 'off', true)`.execute(tx);
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

/** Checks a completion's fields (400 naming the bad one); shared by completeJob and the batched completeJobs. */
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
 */
export async function completeJob(db: Kysely<Database>, input: CompletionInput): Promise<JobSnapshot> {
  const { jobId, tokenHash, outcome, error, artifacts, completionSha256 } = checkCompletion(input);
  return db.transaction().execute(async (tx) => {
    const lease = await tx.selectFrom("leases").selectAll().where("token_sha256", "=", tokenHash).where("job_id", "=", jobId).where("runner_id", "=", input.runnerId).where("workspace_id", "=", input.workspaceId).forUpdate().executeTakeFirst();
    if (lease?.completion_id) {
      if (lease.completion_id === input.completionId && lease.completion_sha256 === completionSha256) return lease.completion_reply as JobSnapshot;
      throw new ConnectError(`job ${jobId} was already completed under this lease by completion ${JSON.stringify(lease.completion_id)}; a different completion is refused`, Code.Aborted);
    }
    const { rows } = await sql<JobRow>`
      update jobs set
        state = case
          when ${outcome} = 'failed' and ${error?.retryable ?? false} and attempts < max_attempts and not cancel_requested then 'queued'
          else ${outcome} end,
        exit_code = ${input.exitCode ?? null},
        error = ${error ? JSON.stringify(error) : null}::jsonb,
        artifacts = case
          when ${outcome} = 'failed' and ${error?.retryable ?? false} and attempts < max_attempts and not cancel_requested then null
          else ${artifacts}::jsonb end,
        settled_at = case
          when ${outcome} = 'failed' and ${error?.retryable ?? false} and attempts < max_attempts and not cancel_requested then null
          else now() end,
        runner_id = null, lease_id = null, lease_token_sha256 = null, lease_expires_at = null, updated_at = now()
      where id = ${jobId} and workspace_id = ${input.workspaceId} and runner_id = ${input.runnerId}
        and state = 'running' and lease_token_sha256 = ${tokenHash} and lease_expires_at > now()
      returning *`.execute(tx);
    const row = rows[0];
    if (!row) {
      const settled = await tx.selectFrom("jobs").select(["state"]).where("id", "=", jobId).where("workspace_id", "=", input.workspaceId).executeTakeFirst();
      if (settled && ["succeeded", "failed", "cancelled"].includes(settled.state)) {
        throw new ConnectError(`job ${jobId} is already ${settled.state}; a different completion is refused`, Code.Aborted);
      }
      throw await leaseRefusal(tx, input, jobId, tokenHash);
    }
    const reply = jobSnapshot(row);
    await tx
      .updateTable("leases")
      .set({
        ended_at: sql`now()`,
        end_reason: row.state === "queued" ? "requeued" : "settled",
        completion_id: input.completionId,
        completion_sha256: completionSha256,
        completion_reply: JSON.stringify(reply),
      })
      .where("id", "=", lease!.id)
      .execute();
    if (row.state === "queued") await sql`select pg_notify(${jobsChannel}, ${input.workspaceId})`.execute(tx);
    return reply;
  });
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
