import type { X509Certificate } from "node:crypto";
import type { TLSSocket } from "node:tls";

const read = new WeakMap<TLSSocket, X509Certificate | null>();

/**
 * The client certificate of a TLS connection, read once: the connection guard asks whether there is
 * one when the session opens, the request identifier judges it on the first request. One read, as
 * node:crypto X509Certificate linked to the intermediates the client sent (Node links the chain only
 * on a socket's first getPeerX509Certificate call; getPeerCertificate builds a JS object of every
 * field and cost as much again per connection: docs/performance.md, connections).
 */
export function peerCertificate(socket: TLSSocket): X509Certificate | undefined {
  let leaf = read.get(socket);
  if (leaf === undefined) {
    leaf = socket.getPeerX509Certificate() ?? null;
    read.set(socket, leaf);
  }
  return leaf ?? undefined;
}
