import type { Http2ServerRequest, Http2Session } from "node:http2";
import type { TLSSocket, DetailedPeerCertificate } from "node:tls";
import { verifyPresentedChain, type CertificatePolicy, type SessionVerdict } from "../identity/certificate-policy.js";
import type { RequestIdentity } from "../api/context.js";

/**
 * Reads the client certificate of a request's TLS session and judges it once
 * per HTTP/2 session (parsing costs ~1 ms); validity in time is judged again
 * on every request by the guard.
 */
export function createRequestIdentifier(policy: CertificatePolicy): (req: Http2ServerRequest) => RequestIdentity {
  const verdicts = new WeakMap<Http2Session, SessionVerdict>();
  return (req) => {
    const session = req.stream.session;
    const socket = session?.socket as TLSSocket | undefined;
    if (!session || !socket) return { verdict: undefined, remoteAddress: undefined };
    let verdict = verdicts.get(session);
    if (!verdict) {
      verdict = verifyPresentedChain(
        {
          der: presentedChain(socket),
          authorized: socket.authorized,
          ...(socket.authorizationError ? { authorizationError: String((socket.authorizationError as Error).message ?? socket.authorizationError) } : {}),
        },
        policy,
      );
      verdicts.set(session, verdict);
    }
    return { verdict, remoteAddress: socket.remoteAddress };
  };
}

function presentedChain(socket: TLSSocket): Buffer[] {
  const leaf = socket.getPeerCertificate(true) as DetailedPeerCertificate | Record<string, never>;
  const out: Buffer[] = [];
  let cert: DetailedPeerCertificate | undefined = "raw" in leaf && leaf.raw ? (leaf as DetailedPeerCertificate) : undefined;
  while (cert?.raw && out.length < 10 && !out.some((d) => d.equals(cert!.raw))) {
    out.push(cert.raw);
    cert = cert.issuerCertificate;
  }
  return out;
}
