import { Code, ConnectError, type ServiceImpl } from "@connectrpc/connect";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { LoginService, SessionService } from "../../gen/forelead/admin/v1/session_pb.js";
import type { PersonSessions } from "../identity/sessions.js";
import { IdTokenRefused } from "../identity/sso.js";
import { audited, recordAction } from "./audit-actions.js";
import { principalOf } from "./context.js";
import { apiVersion } from "./request-rules.js";

/**
 * Person sessions for delegates: an ID token in, a session credential out (shown once). Each call
 * is one audit record naming the person and the delegate; neither the token nor the credential
 * is ever in a record, an error or a log line.
 */
export function createSessionService(
  sessions: PersonSessions | undefined,
): ServiceImpl<typeof SessionService> {
  const configured = () => signOn(sessions);
  return {
    async createSession(req, ctx) {
      const delegate = principalOf(ctx).spiffeId.text;
      const opened = await audited(
        ctx,
        "session.create",
        `a person session for delegate ${delegate}`,
        async () => {
          return refusedAs401(() => configured().open(req.idToken, req.nonce, delegate));
        },
        ({ session }) => ({
          target: `session ${session.id} of ${session.person.spiffeId} ("${session.person.claim}")`,
          reason:
            `signed in through ${delegate} until ${session.expiresAt.toISOString()}` +
            (session.groups.length > 0 ? `, groups ${session.groups.join(", ")}` : ""),
        }),
      );
      return {
        apiVersion,
        sessionCredential: opened.credential,
        person: opened.session.person.spiffeId,
        personClaim: opened.session.person.claim,
        expiresAt: timestampFromDate(opened.session.expiresAt),
      };
    },
    async endSession(req, ctx) {
      const delegate = principalOf(ctx).spiffeId.text;
      const ended = await audited(
        ctx,
        "session.end",
        `a person session of delegate ${delegate}`,
        async () => {
          const found = await configured().end(req.sessionCredential, delegate);
          if (!found.ok) throw new ConnectError(found.reason, Code.NotFound);
          return found.session;
        },
        (session) => ({
          target: `session ${session.id} of ${session.person.spiffeId} ("${session.person.claim}")`,
          reason: `signed out through ${delegate}`,
        }),
      );
      return { apiVersion, ended: ended !== undefined };
    },
    reportSignInRefusal(req, ctx) {
      const reporter = principalOf(ctx).spiffeId.text;
      if (req.method !== "token" && req.method !== "sso")
        throw new ConnectError(
          `method must be "token" or "sso", not ${JSON.stringify(req.method.slice(0, 32))}`,
          Code.InvalidArgument,
        );
      for (const [field, value, most] of [
        ["reason", req.reason, 512],
        ["clientAddress", req.clientAddress, 64],
      ] as const) {
        if (value.trim() === "") throw new ConnectError(`${field} is empty`, Code.InvalidArgument);
        if (Buffer.byteLength(value) > most)
          throw new ConnectError(`${field} is over ${most} bytes`, Code.InvalidArgument);
      }
      recordAction(ctx, {
        action: "session.sign_in",
        target:
          `a ${req.method === "sso" ? "single sign-on" : "sign-in token"} sign-in from ` +
          `${req.clientAddress} at the dashboard of ${reporter}`,
        decision: "deny",
        reason: `refused by the dashboard: ${req.reason}`,
      });
      return Promise.resolve({ apiVersion });
    },
  };
}

/**
 * `forelead login`: an ID token for the CLI's client and a CSR in, a short-lived certificate for
 * the person out. Needs no client certificate (the person has none yet); one audit record, with
 * the person and the certificate, never the token.
 */
export function createLoginService(
  sessions: PersonSessions | undefined,
): ServiceImpl<typeof LoginService> {
  return {
    async login(req, ctx) {
      const { person, certificate: cert } = await audited(
        ctx,
        "certificate.issue",
        "a person's certificate on forelead login",
        () => refusedAs401(() => signOn(sessions).certify(req.idToken, req.nonce, req.csr)),
        ({ person, certificate: c }) => ({
          target:
            `certificate ${c.serialHex} (sha256 ${c.sha256}) for ${person.spiffeId} ` +
            `("${person.claim}"), valid ${c.notBefore.toISOString()} to ` +
            `${c.notAfter.toISOString()}`,
          reason: "issued on forelead login",
          spiffeId: person.spiffeId,
        }),
      );
      return {
        apiVersion,
        person: person.spiffeId,
        personClaim: person.claim,
        certificateChain: cert.chainPem,
        notAfter: timestampFromDate(cert.notAfter),
      };
    },
  };
}

function signOn(sessions: PersonSessions | undefined): PersonSessions {
  if (!sessions)
    throw new ConnectError(
      "single sign-on is not configured on this control plane (serve --sso-issuer)",
      Code.FailedPrecondition,
    );
  return sessions;
}

/** A refused ID token as 401 "sign-in refused: …". */
async function refusedAs401<T>(run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (err) {
    if (err instanceof IdTokenRefused)
      throw new ConnectError(`sign-in refused: ${err.message}`, Code.Unauthenticated);
    throw err;
  }
}
