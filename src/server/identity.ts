import type { Http2ServerRequest, Http2Session } from "node:http2";
import type { TLSSocket } from "node:tls";
import {
  verifyPresentedChain,
  type CertificatePolicy,
  type SessionVerdict,
} from "../identity/certificate-policy.js";
import type { RequestIdentity } from "../api/context.js";
import { peerCertificate, peerChain } from "./peer-certificate.js";

/**
 * Reads the client certificate of a request's TLS session and judges it once per HTTP/2 session;
 * validity in time is judged again on every request by the guard. The certificate is read once per
 * connection (peer-certificate.ts); the chain the client sent only when it is walked here.
 * `verdictIsCurrent` says whether the TLS layer's verdict was reached against the trust bundle now
 * in force (TlsMaterial.handshakeUnderCurrentMaterial); then an authorized chain is not verified a
 * second time.
 */
export function createRequestIdentifier(
  policy: CertificatePolicy,
  verdictIsCurrent: (session: Http2Session) => boolean = () => false,
): (req: Http2ServerRequest) => RequestIdentity {
  const verdicts = new WeakMap<Http2Session, SessionVerdict>();
  return (req) => {
    const session = req.stream.session;
    const socket = session?.socket as TLSSocket | undefined;
    if (!session || !socket) return { verdict: undefined, remoteAddress: undefined };
    let verdict = verdicts.get(session);
    if (!verdict) {
      verdict = verifyPresentedChain(
        {
          leaf: peerCertificate(socket),
          chain: () => peerChain(socket),
          authorized: socket.authorized,
          verdictIsCurrent: socket.authorized && verdictIsCurrent(session),
          authorizationError: socket.authorizationError
            ? String((socket.authorizationError as Error).message ?? socket.authorizationError)
            : undefined,
        },
        policy,
      );
      verdicts.set(session, verdict);
    }
    return { verdict, remoteAddress: socket.remoteAddress };
  };
}
