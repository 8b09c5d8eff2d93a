import { Code, ConnectError } from "@connectrpc/connect";
import { sql, type Kysely, type Transaction } from "kysely";
import type { Database } from "../store/schema.js";
import type { SignedCertificate } from "./issuer.js";

/** How a certificate came to be issued. */
export type IssuedVia = "enroll" | "renew";

/**
 * Where an identity's newest certificate stands:
 * - current: fine;
 * - expiring_soon: expires within the asked window;
 * - renewal_overdue: past 3/4 of its lifetime with no newer certificate. A
 *   runner renews at about half its lifetime, so this one failed to renew;
 * - expired: no valid certificate left;
 * - superseded: an older certificate of an identity that has a newer one;
 * - retired: the runner was retired.
 */
export type CertificateStatus =
  "current" | "expiring_soon" | "renewal_overdue" | "expired" | "superseded" | "retired";

/** An issued certificate with its status. */
export interface IssuedCertificateView {
  readonly serial: string;
  readonly spiffeId: string;
  readonly workspaceId: string;
  readonly runnerId: string;
  readonly notBefore: Date;
  readonly notAfter: Date;
  readonly issuedAt: Date;
  readonly issuedVia: IssuedVia;
  readonly sha256: string;
  readonly status: CertificateStatus;
}

/** Filters of the certificate list. */
export interface CertificateQuery {
  readonly workspaceId?: string;
  readonly runnerId?: string;
  /** Every certificate, not only the newest of each identity. */
  readonly all?: boolean;
  /** "Expiring soon" window in seconds; 7200 when 0. */
  readonly expiringWithinSeconds?: number;
}

/** Records a certificate the issuer signed (in the caller's transaction). */
export async function recordIssuedCertificate(
  db: Kysely<Database> | Transaction<Database>,
  cert: SignedCertificate,
  runner: { workspaceId: string; runnerId: string },
  via: IssuedVia,
  grantId?: string,
): Promise<void> {
  await db
    .insertInto("issued_certificates")
    .values({
      serial: cert.serialHex,
      spiffe_id: cert.spiffeId,
      workspace_id: runner.workspaceId,
      runner_id: runner.runnerId,
      not_before: cert.notBefore,
      not_after: cert.notAfter,
      issued_via: via,
      sha256: cert.sha256,
      grant_id: grantId ?? null,
    })
    .execute();
}

/** Most rows one list returns; an operator narrows by workspace or runner beyond that. */
const maxListed = 5000;

/**
 * Issued certificates, newest first within each identity, with their status
 * judged against the database clock. By default only the newest certificate
 * of each runner identity: the one whose renewal matters.
 */
export async function listIssuedCertificates(
  db: Kysely<Database>,
  q: CertificateQuery,
): Promise<IssuedCertificateView[]> {
  const within = q.expiringWithinSeconds || 7200;
  if (!Number.isInteger(within) || within < 1 || within > 30 * 86_400) {
    throw new ConnectError(
      `expiringWithinSeconds must be 1 to ${30 * 86_400}; got ${q.expiringWithinSeconds}`,
      Code.InvalidArgument,
    );
  }
  // One statement: the rank finds each identity's newest certificate, the
  // join finds retirements, and now() is the database's clock, not ours.
  const { rows } = await sql<{
    serial: string;
    spiffe_id: string;
    workspace_id: string;
    runner_id: string;
    not_before: Date;
    not_after: Date;
    issued_at: Date;
    issued_via: IssuedVia;
    sha256: string;
    newest: boolean;
    retired: boolean;
    now: Date;
  }>`
    select * from (
      select c.*, row_number() over (partition by c.workspace_id, c.runner_id order by c.issued_at
        desc, c.serial) = 1 as newest,
             r.runner_id is not null as retired, now() as now
      from issued_certificates c
      left join runner_retirements r on r.workspace_id = c.workspace_id and r.runner_id = c.runner_id
      where (${q.workspaceId ?? ""} = '' or c.workspace_id = ${q.workspaceId ?? ""})
        and (${q.runnerId ?? ""} = '' or c.runner_id = ${q.runnerId ?? ""})
    ) ranked
    where ${q.all ?? false} or newest
    order by workspace_id, runner_id, issued_at desc
    limit ${maxListed}`.execute(db);
  return rows.map((r) => ({
    serial: r.serial,
    spiffeId: r.spiffe_id,
    workspaceId: r.workspace_id,
    runnerId: r.runner_id,
    notBefore: r.not_before,
    notAfter: r.not_after,
    issuedAt: r.issued_at,
    issuedVia: r.issued_via,
    sha256: r.sha256,
    status: statusOf(r, within * 1000),
  }));
}

/** Judges one certificate; exported for its unit test. */
export function statusOf(
  c: { not_before: Date; not_after: Date; newest: boolean; retired: boolean; now: Date },
  expiringWithinMs: number,
): CertificateStatus {
  if (c.retired) return "retired";
  if (!c.newest) return "superseded";
  const now = c.now.getTime();
  const start = c.not_before.getTime();
  const end = c.not_after.getTime();
  if (now >= end) return "expired";
  if (now >= start + (end - start) * 0.75) return "renewal_overdue";
  if (end - now <= expiringWithinMs) return "expiring_soon";
  return "current";
}
