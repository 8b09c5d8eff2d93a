import type { Store } from "../store/database.js";
import { createDatabaseAuditSink, type AuditSink } from "./audit.js";
import { aggregateRefusals } from "./audit-aggregation.js";
import { listAuditRecords, type AuditQuery, type StoredAuditRecord } from "./audit-trail.js";
import {
  listIssuedCertificates,
  type CertificateQuery,
  type IssuedCertificateView,
} from "./certificates.js";
import { createEnrollments, type Enrollments } from "./enrollment.js";
import { createGrant, type CreatedGrant, type GrantRequest } from "./grants.js";
import type { Issuer } from "./issuer.js";
import { createRetirements, type Retirements } from "./retirement.js";
import type { RoleTable } from "./roles.js";
import { createPersonSessions, type PersonSessions } from "./sessions.js";
import { createIdTokenVerifier, type SsoOptions } from "./sso.js";

/**
 * Who may call and what they did: roles, the issuing CA, enrollment and
 * renewal, retired runners, grants, the audit sink and trail, and the issued
 * certificates, all over one database.
 */
export interface Identity {
  readonly trustDomain: string;
  readonly roles: RoleTable;
  /**
   * Undefined when the control plane has no issuing CA (runner certificates come from elsewhere).
   */
  readonly issuer: Issuer | undefined;
  readonly audit: AuditSink;
  readonly retirements: Retirements;
  readonly enrollment: Enrollments;
  /** People signed in by single sign-on; undefined without --sso-issuer. */
  readonly sessions: PersonSessions | undefined;
  /** A one-time enrollment grant (see grants.ts). */
  createGrant(req: GrantRequest): Promise<CreatedGrant>;
  /** The audit trail newest first, including what this replica still buffers. */
  listAuditRecords(q: AuditQuery): Promise<{ records: StoredAuditRecord[]; nextPageToken: string }>;
  listCertificates(q: CertificateQuery): Promise<IssuedCertificateView[]>;
  /** Stops following retirements, then writes the buffered audit records. */
  close(): Promise<void>;
}

/**
 * What the identity facade is built from; the roles and issuer are checked before the database
 * opens.
 */
export interface IdentityOptions {
  readonly store: Store;
  readonly trustDomain: string;
  readonly roles: RoleTable;
  readonly issuer: Issuer | undefined;
  /** The single sign-on provider whose ID tokens prove people. */
  readonly sso?: SsoOptions;
  /** A runner silent this long is offline: enrolling its identity again replaces nothing live. */
  readonly runnerOfflineSeconds: number;
  /** Where audit records the database cannot take are spooled, and the spool's bound in bytes. */
  readonly auditSpool: {
    readonly dir: string;
    readonly maxBytes?: number;
    /** Which database the records are for, without credentials. */
    readonly database: string;
    /** A folder of replicas' spools to adopt orphans from. */
    readonly adoptFrom?: string;
  };
}

/** Starts the identity facade: loads the retired runners and follows new retirements. */
export async function createIdentity(options: IdentityOptions): Promise<Identity> {
  const { store, trustDomain, roles, issuer, auditSpool } = options;
  const { db } = store;
  const audit = aggregateRefusals(
    await createDatabaseAuditSink(db, {
      spoolDir: auditSpool.dir,
      database: auditSpool.database,
      adoptFrom: auditSpool.adoptFrom || undefined,
      spoolMaxBytes: auditSpool.maxBytes || undefined,
    }),
  );
  const retirements = await createRetirements(store).catch(async (err: unknown) => {
    await audit.close();
    throw err;
  });
  const enrollment = createEnrollments({
    db,
    issuer,
    trustDomain,
    runnerRefusal: retirements.refusal,
    runnerOfflineSeconds: options.runnerOfflineSeconds,
  });
  return {
    trustDomain,
    roles,
    issuer,
    audit,
    retirements,
    enrollment,
    sessions: options.sso
      ? createPersonSessions(db, createIdTokenVerifier(options.sso, trustDomain), issuer)
      : undefined,
    createGrant: (req) => createGrant(db, req),
    async listAuditRecords(q) {
      // Records of this replica wait in a buffer for up to 200 ms; an operator asking now should
      // see them.
      await audit.flush();
      return listAuditRecords(db, q);
    },
    listCertificates: (q) => listIssuedCertificates(db, q),
    async close() {
      try {
        await retirements.close();
      } finally {
        await audit.close();
      }
    },
  };
}
