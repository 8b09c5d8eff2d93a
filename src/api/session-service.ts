import { Code, ConnectError, type ServiceImpl } from "@connectrpc/connect";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { SessionService } from "../../gen/forelead/admin/v1/session_pb.js";
import type { PersonSessions } from "../identity/sessions.js";
import { IdTokenRefused } from "../identity/sso.js";
import { audited } from "./audit-actions.js";
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
  const configured = (): PersonSessions => {
    if (!sessions)
      throw new ConnectError(
        "single sign-on is not configured on this control plane (serve --sso-issuer)",
        Code.FailedPrecondition,
      );
    return sessions;
  };
  return {
    async createSession(req, ctx) {
      const delegate = principalOf(ctx).spiffeId.text;
      const opened = await audited(
        ctx,
        "session.create",
        `a person session for delegate ${delegate}`,
        async () => {
          try {
            return await configured().open(req.idToken, req.nonce, delegate);
          } catch (err) {
            if (err instanceof IdTokenRefused)
              throw new ConnectError(`sign-in refused: ${err.message}`, Code.Unauthenticated);
            throw err;
          }
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
  };
}
