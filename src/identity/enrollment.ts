import { Code, ConnectError } from "@connectrpc/connect";
import type { Kysely } from "kysely";
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
}

/** A runner's first certificate and the grant it used. */
interface Enrollment {
  readonly certificate: SignedCertificate;
  readonly workspaceId: string;
  readonly grant: GrantRecord;
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
    const certificate = await issuer.sign(
      runnerSpiffeId(deps.trustDomain, runner.runnerId, runner.workspaceId),
      csr,
    );
    await recordIssuedCertificate(tx, certificate, runner, "enroll", grant.id);
    return { certificate, workspaceId: runner.workspaceId, grant };
  });
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
