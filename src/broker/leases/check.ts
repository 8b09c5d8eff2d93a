import { Code, ConnectError } from "@connectrpc/connect";
import { sql, type Kysely, type Selectable, type Transaction } from "kysely";
import type { Database, JobsTable } from "../../store/schema.js";
import { checkJobId, checkLeaseToken } from "../ids.js";
import { liveLease } from "./sql-fragments.js";

/** The caller of a lease-scoped route: its runner and workspace come from its certificate. */
export interface LeaseHolder {
  readonly workspaceId: string;
  readonly runnerId: string;
}

/**
 * Explains why `tokenHash` is not a live lease on `jobId` for `holder`, as
 * the error to throw: 404 when the job is unknown in the holder's workspace,
 * otherwise 409 saying which: not this runner's token (foreign and unknown
 * tokens alike), released, expired (with when),
 * or settled. Called only after a guarded statement matched no row, so the
 * happy path never pays for it.
 */
export async function leaseRefusal(
  db: Kysely<Database> | Transaction<Database>,
  holder: LeaseHolder,
  jobId: string,
  tokenHash: Buffer,
): Promise<ConnectError> {
  const job = await db
    .selectFrom("jobs")
    .selectAll()
    .where("id", "=", jobId)
    .where("workspace_id", "=", holder.workspaceId)
    .executeTakeFirst();
  if (!job)
    return new ConnectError(
      `job ${jobId} not found in workspace "${holder.workspaceId}"`,
      Code.NotFound,
    );
  const lease = await db
    .selectFrom("leases")
    .selectAll()
    .where("token_sha256", "=", tokenHash)
    .executeTakeFirst();
  const { rows } = await sql<{ now: Date }>`select now() as now`.execute(db);
  const now = rows[0]!.now;
  const refuse = (message: string) => new ConnectError(message, Code.Aborted);
  // Another runner's token gets the same answer as a made-up one: a difference would confirm a live
  // lease exists.
  if (
    !lease ||
    lease.job_id !== jobId ||
    lease.runner_id !== holder.runnerId ||
    lease.workspace_id !== holder.workspaceId
  ) {
    return refuse(
      `the lease token is not a lease of this runner on job ${jobId}; use the ` +
        `token from the claim that leased this job`,
    );
  }
  switch (lease.end_reason) {
    case "released":
      return refuse(
        `the lease on job ${jobId} was released at ${iso(lease.ended_at)}; claim a job again`,
      );
    case "settled":
    case "requeued":
      return refuse(
        `the lease on job ${jobId} ended at ${iso(lease.ended_at)} when the ` +
          `runner completed it (job now ${job.state}); claim a job again`,
      );
    case "suspended":
      return refuse(
        `the lease on job ${jobId} ended at ${iso(lease.ended_at)} when the job ` +
          `suspended for input (job now ${job.state}); claim a job again`,
      );
    case "timed_out":
      return refuse(
        `${job.failure_message ?? `job ${jobId} ran past its timeout and was failed`}; ` +
          `stop the job, it will not be accepted`,
      );
    case "expired":
      return refuse(
        `the lease on job ${jobId} expired at ${iso(lease.expires_at)}; stop the job and claim again`,
      );
  }
  if (lease.expires_at <= now)
    return refuse(
      `the lease on job ${jobId} expired at ${iso(lease.expires_at)}; stop the job and claim again`,
    );
  if (job.state !== "running")
    return refuse(`job ${jobId} is ${job.state}; its lease is no longer live`);
  return refuse(`the lease on job ${jobId} is not live`);
}

function iso(d: Date | null): string {
  return d ? d.toISOString() : "(unknown time)";
}

/** A live lease with its job, as lease-scoped routes (streams, code, uploads) need it. */
export interface LiveLease {
  readonly leaseId: number;
  readonly attempt: number;
  readonly expiresAt: Date;
  readonly job: Selectable<JobsTable>;
}

/**
 * The live lease behind a lease-scoped call, or the error saying why there is
 * none (404 unknown job, 409 foreign/released/expired/settled). One indexed
 * read on the happy path.
 */
export async function requireLiveLease(
  db: Kysely<Database> | Transaction<Database>,
  holder: LeaseHolder,
  jobId: string,
  leaseToken: string,
): Promise<LiveLease> {
  const id = checkJobId(jobId);
  const tokenHash = checkLeaseToken(leaseToken);
  const row = await db
    .selectFrom("jobs")
    .innerJoin("leases", "leases.id", "jobs.lease_id")
    .selectAll("jobs")
    .select(["leases.id as live_lease_id", "leases.attempt as live_attempt"])
    .where(
      liveLease(
        { jobId: id, workspaceId: holder.workspaceId, runnerId: holder.runnerId, token: tokenHash },
        "jobs",
      ),
    )
    .executeTakeFirst();
  if (!row) throw await leaseRefusal(db, holder, id, tokenHash);
  const { live_lease_id, live_attempt, ...job } = row;
  return { leaseId: live_lease_id, attempt: live_attempt, expiresAt: job.lease_expires_at!, job };
}
