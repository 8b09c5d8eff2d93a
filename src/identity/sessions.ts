import { createHash, randomBytes, randomUUID } from "node:crypto";
import { sql, type Kysely } from "kysely";
import type { Database } from "../store/schema.js";
import type { Person } from "./person.js";
import { IdTokenRefused, type IdTokenVerifier } from "./sso.js";
import { verifyCsr } from "./csr.js";
import type { Issuer, SignedCertificate } from "./issuer.js";

/** How long a certificate from `forelead login` lasts (the issuer's lifetime when shorter). */
const loginCertificateLifetimeMs = 8 * 3600 * 1000;

/** How long a person session lasts unless ended first. */
const sessionLifetimeSeconds = 8 * 3600;

/** Every session credential starts with this, so a leaked one is easy to recognise. */
const credentialPrefix = "fps_";
const credentialPattern = /^fps_[A-Za-z0-9_-]{43}$/;

/** A session a delegate opened for a person. */
interface PersonSession {
  readonly id: string;
  readonly person: Person;
  readonly groups: readonly string[];
  readonly delegate: string;
  readonly expiresAt: Date;
}

/** What opening a session needs: the verified person and the delegate that will act for it. */
interface SessionRequest {
  readonly person: Person;
  readonly groups: readonly string[];
  readonly delegate: string;
}

/** A session lookup: the session, or why the credential does not open one (for the refusal). */
export type SessionLookup =
  | { readonly ok: true; readonly session: PersonSession }
  | { readonly ok: false; readonly reason: string };

/**
 * Opens a session: 256 random bits, of which only the SHA-256 is stored. The credential is
 * returned here and nowhere else.
 */
async function openSession(
  db: Kysely<Database>,
  req: SessionRequest,
): Promise<{ credential: string; session: PersonSession }> {
  const credential = credentialPrefix + randomBytes(32).toString("base64url");
  const row = await db
    .insertInto("person_sessions")
    .values({
      id: randomUUID(),
      credential_sha256: hashCredential(credential),
      person: req.person.spiffeId,
      person_claim: req.person.claim,
      person_groups: [...req.groups],
      delegate: req.delegate,
      expires_at: sql<Date>`now() + make_interval(secs => ${sessionLifetimeSeconds})`,
      ended_at: null,
    })
    .returning(["id", "expires_at"])
    .executeTakeFirstOrThrow();
  return {
    credential,
    session: { ...req, id: row.id, expiresAt: new Date(row.expires_at) },
  };
}

/**
 * The live session `credential` opens for `delegate`, judged by the database clock; a credential
 * of another delegate, an ended or expired session and an unknown credential are each refused
 * with their own reason (none quotes the credential).
 */
async function findSession(
  db: Kysely<Database>,
  credential: string,
  delegate: string,
): Promise<SessionLookup> {
  if (!credentialPattern.test(credential))
    return { ok: false, reason: "the session credential is malformed" };
  const row = await db
    .selectFrom("person_sessions")
    .selectAll()
    .select(sql<boolean>`expires_at <= now()`.as("expired"))
    .where("credential_sha256", "=", hashCredential(credential))
    .executeTakeFirst();
  if (!row) return { ok: false, reason: "the session credential is unknown" };
  const who = `the session of ${row.person}`;
  if (row.delegate !== delegate)
    return { ok: false, reason: `${who} belongs to another delegate (${row.delegate})` };
  if (row.ended_at)
    return { ok: false, reason: `${who} ended at ${new Date(row.ended_at).toISOString()}` };
  if (row.expired)
    return { ok: false, reason: `${who} expired at ${new Date(row.expires_at).toISOString()}` };
  return {
    ok: true,
    session: {
      id: row.id,
      person: { spiffeId: row.person, claim: row.person_claim },
      groups: row.person_groups,
      delegate: row.delegate,
      expiresAt: new Date(row.expires_at),
    },
  };
}

/** Ends a session now; true when it was live. */
async function endSession(db: Kysely<Database>, id: string): Promise<boolean> {
  const ended = await db
    .updateTable("person_sessions")
    .set({ ended_at: sql<Date>`now()` })
    .where("id", "=", id)
    .where("ended_at", "is", null)
    .executeTakeFirst();
  return ended.numUpdatedRows > 0n;
}

function hashCredential(credential: string): Buffer {
  return createHash("sha256").update(credential).digest();
}

/** Single sign-on as the control plane's identity facade offers it. */
export interface PersonSessions {
  readonly verifier: IdTokenVerifier;
  /**
   * Verifies a person's ID token for the dashboard's client (`--sso-client-id`) and `nonce`, then
   * opens a session bound to `delegate`; throws IdTokenRefused naming why, creating nothing.
   */
  open(
    idToken: string,
    nonce: string,
    delegate: string,
  ): Promise<{ credential: string; session: PersonSession }>;
  find(credential: string, delegate: string): Promise<SessionLookup>;
  /** Ends the session `credential` opens for `delegate`; refuses it as findSession does. */
  end(credential: string, delegate: string): Promise<SessionLookup>;
  /**
   * `forelead login`: verifies an ID token for the CLI's client (`--sso-cli-client-id`) and signs
   * the CSR's key for the person; throws IdTokenRefused naming why, signing nothing.
   */
  certify(
    idToken: string,
    nonce: string,
    csrPem: string,
  ): Promise<{ person: Person; certificate: SignedCertificate }>;
}

/** The person sessions of one provider, stored in `db`. */
export function createPersonSessions(
  db: Kysely<Database>,
  verifier: IdTokenVerifier,
  issuer: Issuer | undefined,
): PersonSessions {
  return {
    verifier,
    async certify(idToken, nonce, csrPem) {
      const audience = verifier.options.cliClientId;
      if (!audience)
        throw new IdTokenRefused(
          "this control plane takes no CLI sign-ins: serve has no --sso-cli-client-id",
        );
      if (!issuer)
        throw new IdTokenRefused(
          "this control plane has no issuing CA (serve --issuer-cert/--issuer-key), so it " +
            "cannot give people certificates",
        );
      const csr = await verifyCsr(csrPem);
      const { person } = await verifier.verify(idToken, {
        audience,
        nonce: nonce === "" ? undefined : nonce,
      });
      const certificate = await issuer.sign(person.spiffeId, csr, loginCertificateLifetimeMs);
      return { person, certificate };
    },
    async open(idToken, nonce, delegate) {
      const audience = verifier.options.clientId;
      if (!audience)
        throw new IdTokenRefused(
          "this control plane takes no dashboard sign-ins: serve has no --sso-client-id",
        );
      if (nonce === "")
        throw new IdTokenRefused("nonce is required: the one the dashboard sent with the sign-in");
      const verified = await verifier.verify(idToken, { audience, nonce });
      return openSession(db, { person: verified.person, groups: verified.groups, delegate });
    },
    find: (credential, delegate) => findSession(db, credential, delegate),
    async end(credential, delegate) {
      const found = await findSession(db, credential, delegate);
      if (found.ok) await endSession(db, found.session.id);
      return found;
    },
  };
}
