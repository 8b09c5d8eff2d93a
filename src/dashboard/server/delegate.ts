import { type Client, Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { SessionService } from "../../../gen/forelead/admin/v1/session_pb.js";
import type { Endpoint } from "../../cli/connection.js";
import type { Person } from "./sessions.js";
import { SsoRefused } from "./sso.js";

/** A person's session on the control plane, as CreateSession opened it. */
interface OpenedSession {
  readonly person: Person;
  /** The credential for forelead-on-behalf-of; kept in the dashboard session only. */
  readonly credential: string;
  /** When the control plane ends it (ms since the epoch). */
  readonly endsAt: number;
}

/**
 * The dashboard as a delegate (its certificate is granted `delegate` on the control plane): it
 * hands over a person's ID token for a session credential, and ends that session at sign-out
 * (SessionService, proto/forelead/admin/v1/session.proto).
 */
export interface DelegateSessions {
  /** Opens the person's session; throws SsoRefused with the control plane's reason. */
  open(idToken: string, nonce: string): Promise<OpenedSession>;
  /** Ends the session of `credential`; throws when the control plane cannot be told. */
  end(credential: string): Promise<void>;
  close(): void;
}

/** SessionService over HTTP/2 + TLS with the dashboard's certificate (`endpoint`). */
export function connectSessionService(endpoint: Endpoint): {
  readonly client: Client<typeof SessionService>;
  close(): void;
} {
  const nodeOptions = { ca: endpoint.ca, cert: endpoint.cert, key: endpoint.key };
  const sessionManager = new Http2SessionManager(endpoint.baseUrl, {}, nodeOptions);
  const client = createClient(
    SessionService,
    createConnectTransport({
      baseUrl: endpoint.baseUrl,
      httpVersion: "2",
      nodeOptions,
      sessionManager,
    }),
  );
  return { client, close: () => sessionManager.abort() };
}

/** The person sessions of a dashboard whose certificate is a delegate (`endpoint`). */
export function createDelegateSessions(endpoint: Endpoint): DelegateSessions {
  const { client, close } = connectSessionService(endpoint);
  return {
    async open(idToken, nonce) {
      try {
        const reply = await client.createSession({ apiVersion: "v1", idToken, nonce });
        return {
          person: { id: reply.person, via: "sso", claim: reply.personClaim },
          credential: reply.sessionCredential,
          endsAt: reply.expiresAt ? timestampDate(reply.expiresAt).getTime() : Date.now(),
        };
      } catch (err) {
        const e = ConnectError.from(err);
        throw new SsoRefused(
          e.code === Code.Unavailable ? 502 : 401,
          `the control plane refused the sign-in: ${e.rawMessage.replace(/^sign-in refused: /, "")}`,
          e.code !== Code.Unavailable,
        );
      }
    },
    async end(credential) {
      await client.endSession({ apiVersion: "v1", sessionCredential: credential });
    },
    close,
  };
}
