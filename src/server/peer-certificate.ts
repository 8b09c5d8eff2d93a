import type { X509Certificate } from "node:crypto";
import type { TLSSocket } from "node:tls";
import type { PresentedLeaf } from "../identity/certificate-policy.js";

const leaves = new WeakMap<TLSSocket, PresentedLeaf | null>();
const chains = new WeakMap<TLSSocket, X509Certificate | null>();

/**
 * The client certificate of a TLS connection, read once: the connection guard asks whether there is
 * one when the session opens, the request identifier judges it on the first request. Read as the
 * abbreviated legacy object (its DER, SHA-256 fingerprint and validity), not as a node:crypto
 * X509Certificate: that one links the chain the client sent by copying each certificate of it, and
 * a copy is a full decode in OpenSSL 3 (about 135 µs a certificate here; clients send their CA
 * along), so it cost twice the legacy read per connection (docs/performance.md, connections).
 */
export function peerCertificate(socket: TLSSocket): PresentedLeaf | undefined {
  let leaf = leaves.get(socket);
  if (leaf === undefined) {
    const read = socket.getPeerCertificate(false);
    leaf = read?.raw?.length
      ? {
          raw: read.raw,
          fingerprint256: read.fingerprint256,
          validFrom: read.valid_from,
          validTo: read.valid_to,
        }
      : null;
    leaves.set(socket, leaf);
  }
  return leaf ?? undefined;
}

/**
 * The client certificate as node:crypto X509Certificate linked to the intermediates the client
 * sent, for a walk of the chain of our own. Read once: Node moves the sent chain into the first
 * one it returns.
 */
export function peerChain(socket: TLSSocket): X509Certificate | undefined {
  let leaf = chains.get(socket);
  if (leaf === undefined) {
    leaf = socket.getPeerX509Certificate() ?? null;
    chains.set(socket, leaf);
  }
  return leaf ?? undefined;
}
