import { Code, ConnectError } from "@connectrpc/connect";
import { sql, type Kysely, type Transaction } from "kysely";
import { liveLeaseCount, runnerState } from "../broker/fleet/state.js";
import type { Database } from "../store/schema.js";
import { recordIssuedCertificate } from "./certificates.js";
import { verifyCsr } from "./csr.js";
import { useGrant, type GrantRecord } from "./grants.js";
import type { Issuer, SignedCertificate } from "./issuer.js";
import { runnerSpiffeId } from "./principal.js";
import { checkSegmentId } from "./segment-id.js";

/** What enrollment and renewal need. */
export interface EnrollmentDeps {
  readonly db: Kysely<Database>;
  /**
   * Undefined when the control plane has no issuing CA (runner certificates come from elsewhere).
   */
  readonly issuer: Issuer | undefined;
  readonly trustDomain: string;
  /** Why a runner identity is refused (retired), or undefined. */
  readonly runnerRefusal: (runner: { workspaceId: string; runnerId: string }) => string | undefined;
  /** A runner silent this long is offline (forelead_runner_state): no longer in use. */
  readonly runnerOfflineSeconds: number;
}

/** A runner's first certificate and the grant it used. */
interface Enrollment {
  readonly certificate: SignedCertificate;
  readonly workspaceId: string;
  readonly grant: GrantRecord;
  /** Set when the identity was in use and the grant said replace: what was in use. */
  readonly replaced?: string;
}

/**
 * Enrollment and renewal bound to one database and issuer: what the enroll and runner services
 * call.
 */
export interface Enrollments {
  /** See enrollRunner. */
  enroll(req: { grant: string; runnerId: string; csr: string }): Promise<Enrollment>;
  /** See renewRunnerCertificate. */
  renew(
    runner: { workspaceId: string; runnerId: string; spiffeId: string },
    csrPem: string,
  ): Promise<SignedCertificate>;
}

/** Binds enrollment and renewal to `deps`. */
export function createEnrollments(deps: EnrollmentDeps): Enrollments {
  return {
    enroll: (req) => enrollRunner(deps, req),
    renew: (runner, csrPem) => renewRunnerCertificate(deps, runner, csrPem),
  };
}

/**
 * Enrolls a runner: verifies the CSR, then, in one transaction, uses the
 * grant (single use), signs a certificate whose only URI SAN is the runner's
 * SPIFFE ID in the grant's workspace and records it. Anything that fails
 * after the grant was taken rolls the transaction back, leaving the grant
 * unused; a CSR that fails its checks never touches the grant.
 */
async function enrollRunner(
  deps: EnrollmentDeps,
  req: { grant: string; runnerId: string; csr: string },
): Promise<Enrollment> {
  const issuer = requireIssuer(deps.issuer);
  if (!req.runnerId)
    throw new ConnectError(
      "runnerId is required: the id this runner will have (a SPIFFE path segment)",
      Code.InvalidArgument,
    );
  checkSegmentId("runnerId", req.runnerId);
  const csr = await verifyCsr(req.csr);
  return deps.db.transaction().execute(async (tx) => {
    const grant = await useGrant(tx, req.grant, req.runnerId);
    const runner = { workspaceId: grant.workspace_id, runnerId: req.runnerId };
    const refusal = deps.runnerRefusal(runner);
    if (refusal) throw new ConnectError(refusal, Code.PermissionDenied);
    const inUse = await identityInUse(tx, runner, deps.runnerOfflineSeconds);
    if (inUse && !grant.replace)
      throw new ConnectError(
        `runner "${runner.runnerId}" in workspace "${runner.workspaceId}" is in use: ${inUse}; ` +
          `enrolling it again would give a second key to the same identity. Stop that runner ` +
          `and let it turn offline and its certificate end, retire it, or create a grant with ` +
          `--replace (replace: true) to replace it (audited)`,
        Code.FailedPrecondition,
      );
    const certificate = await issuer.sign(
      runnerSpiffeId(deps.trustDomain, runner.runnerId, runner.workspaceId),
      csr,
    );
    await recordIssuedCertificate(tx, certificate, runner, "enroll", grant.id);
    return { certificate, workspaceId: runner.workspaceId, grant, replaced: inUse };
  });
}

/**
 * Why the identity is in use, or undefined: its runner is live (forelead_runner_state neither
 * offline nor retired), or a certificate issued for it has not expired.
 */
async function identityInUse(
  tx: Transaction<Database>,
  runner: { workspaceId: string; runnerId: string },
  offlineSeconds: number,
): Promise<string | undefined> {
  const live = await tx
    .selectFrom("runners as r")
    .select(["r.last_seen_at", runnerState("r", liveLeaseCount("r"), offlineSeconds).as("state")])
    .where("r.workspace_id", "=", runner.workspaceId)
    .where("r.runner_id", "=", runner.runnerId)
    .executeTakeFirst();
  const cert = await tx
    .selectFrom("issued_certificates")
    .select(["serial", "not_after"])
    .where("workspace_id", "=", runner.workspaceId)
    .where("runner_id", "=", runner.runnerId)
    .where("not_after", ">", sql<Date>`now()`)
    .orderBy("not_after", "desc")
    .executeTakeFirst();
  const reasons: string[] = [];
  if (live && live.state !== "offline" && live.state !== "retired")
    reasons.push(
      `its runner is ${live.state} (last heard from ${live.last_seen_at.toISOString()})`,
    );
  if (cert)
    reasons.push(
      `a certificate issued for it is valid until ${cert.not_after.toISOString()} ` +
        `(serial ${cert.serial})`,
    );
  return reasons.length ? reasons.join(", and ") : undefined;
}

/**
 * Renews a runner's certificate: a new certificate for the caller's own
 * identity (taken from its current certificate, never from the CSR) over the
 * CSR's key. The guard has already refused retired runners.
 */
async function renewRunnerCertificate(
  deps: EnrollmentDeps,
  runner: { workspaceId: string; runnerId: string; spiffeId: string },
  csrPem: string,
): Promise<SignedCertificate> {
  const issuer = requireIssuer(deps.issuer);
  const csr = await verifyCsr(csrPem);
  const certificate = await issuer.sign(runner.spiffeId, csr);
  await recordIssuedCertificate(deps.db, certificate, runner, "renew");
  return certificate;
}

function requireIssuer(issuer: Issuer | undefined): Issuer {
  if (issuer) return issuer;
  throw new ConnectError(
    "this control plane has no issuing CA, so it cannot enroll or renew " +
      "runners; start forelead serve with --issuer-cert and --issuer-key, or " +
      "issue runner certificates with your own CA (SPIRE, Vault, cert-manager)",
    Code.FailedPrecondition,
  );
}
