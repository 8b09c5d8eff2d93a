import { randomUUID } from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import { SignJWT } from "jose";
import { sql, type Kysely } from "kysely";
import { checkJobId, checkLeaseToken } from "../../broker/ids.js";
import { leaseRefusal, type LeaseHolder } from "../../broker/leases/check.js";
import { liveLease } from "../../broker/leases/sql-fragments.js";
import { checkAudience } from "../../broker/jobs/rules.js";
import type { Database } from "../../store/schema.js";
import { jobTokenAlg, type JobTokenKeys } from "./key-set.js";

/** Bounds of a job's ID token. */
export const jobTokenLimits = {
  /** The longest lifetime; --job-token-max-lifetime may only lower it. */
  maxLifetimeSeconds: 15 * 60,
} as const;

/** What a job token is signed under. */
export interface JobTokenSettings {
  /** The `iss` claim, e.g. https://ci.example:8444 (--job-token-issuer-url). */
  readonly issuerUrl: string;
  readonly trustDomain: string;
  /** At most jobTokenLimits.maxLifetimeSeconds. */
  readonly maxLifetimeSeconds: number;
  /**
   * The `sub` claim's path under the trust domain, with {workspace}, {job}, {pipeline} and {step}
   * replaced; default "workspaces/{workspace}/jobs/{job}". A template naming {pipeline} or {step}
   * gives "-" for a job outside a pipeline.
   */
  readonly subjectTemplate: string;
  /** The current key set (re-read when its file changes). */
  readonly keys: () => Promise<JobTokenKeys>;
}

/** The default `sub` path: the job's own SPIFFE ID. */
export const defaultSubjectTemplate = "workspaces/{workspace}/jobs/{job}";

/** A lease-scoped request for a token. */
export interface JobTokenRequest extends LeaseHolder {
  readonly jobId: string;
  readonly leaseToken: string;
  readonly audience: string;
}

/** An issued token and what its audit record keeps of it (never the token). */
export interface IssuedJobToken {
  readonly token: string;
  readonly expiresAt: Date;
  readonly jti: string;
  readonly subject: string;
}

/**
 * Signs an ID token for the job under the caller's live lease, for one of the audiences its
 * enqueue allowed: 400 for a malformed audience, 404/409 as any lease-scoped call for a lease that
 * is not live, 403 for a job without idToken or an audience it does not allow. Times are the
 * database's: exp is at most the lease's expiry and the settings' lifetime.
 */
export async function issueJobToken(
  db: Kysely<Database>,
  settings: JobTokenSettings,
  req: JobTokenRequest,
): Promise<IssuedJobToken> {
  checkAudience("audience", req.audience);
  const jobId = checkJobId(req.jobId);
  const tokenHash = checkLeaseToken(req.leaseToken);
  // The lease check, the clock and the pipeline step in one statement, no transaction: one round
  // trip where BEGIN, two statements and COMMIT were four (docs/performance.md, section 13).
  const facts = await db
    .selectFrom("jobs")
    .innerJoin("leases", "leases.id", "jobs.lease_id")
    .leftJoin("pipeline_steps as s", "s.job_id", "jobs.id")
    .leftJoin("pipelines as p", "p.id", "s.pipeline_id")
    .selectAll("jobs")
    .select([
      "leases.attempt as live_attempt",
      sql<Date>`now()`.as("now"),
      "s.pipeline_id as step_pipeline_id",
      "p.name as pipeline",
      "s.name as step",
    ])
    .where(
      liveLease(
        { jobId, workspaceId: req.workspaceId, runnerId: req.runnerId, token: tokenHash },
        "jobs",
      ),
    )
    .executeTakeFirst();
  if (!facts) throw await leaseRefusal(db, req, jobId, tokenHash);
  const { live_attempt: attempt, now, step_pipeline_id, pipeline, step, ...job } = facts;
  const allowed = job.id_token_audiences;
  if (!allowed)
    throw new ConnectError(
      `job ${job.id} was enqueued without idToken, so it gets no ID token; enqueue it with ` +
        `idToken: {allowedAudiences: [${JSON.stringify(req.audience)}]}`,
      Code.PermissionDenied,
    );
  if (!allowed.includes(req.audience))
    throw new ConnectError(
      `audience ${JSON.stringify(req.audience)} is not in job ${job.id}'s ` +
        `idToken.allowedAudiences (${allowed.map((a) => JSON.stringify(a)).join(", ")})`,
      Code.PermissionDenied,
    );
  const nowS = Math.floor(now.getTime() / 1000);
  const exp = Math.min(
    nowS + settings.maxLifetimeSeconds,
    Math.floor(job.lease_expires_at!.getTime() / 1000),
  );
  const subject =
    `spiffe://${settings.trustDomain}/` +
    settings.subjectTemplate
      .replaceAll("{workspace}", job.workspace_id)
      .replaceAll("{job}", job.id)
      .replaceAll("{pipeline}", pipeline ?? "-")
      .replaceAll("{step}", step ?? "-");
  const jti = randomUUID();
  const { signing } = await settings.keys();
  const token = await new SignJWT({
    workspace: job.workspace_id,
    job_id: job.id,
    attempt,
    runner_id: req.runnerId,
    pipeline_id: step_pipeline_id ?? undefined,
    pipeline: pipeline ?? undefined,
    step: step ?? undefined,
    repository: job.repository ?? undefined,
    ref: job.target_branch ?? undefined,
    enqueued_by: job.enqueued_by ?? undefined,
  })
    .setProtectedHeader({ alg: jobTokenAlg, kid: signing.kid, typ: "JWT" })
    .setIssuer(settings.issuerUrl)
    .setSubject(subject)
    .setAudience(req.audience)
    .setIssuedAt(nowS)
    .setNotBefore(nowS)
    .setExpirationTime(exp)
    .setJti(jti)
    .sign(signing.key);
  return { token, expiresAt: new Date(exp * 1000), jti, subject };
}
