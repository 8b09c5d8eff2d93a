import http2 from "node:http2";
import type { Http2Session } from "node:http2";
import type { AddressInfo } from "node:net";
import { Code, ConnectError } from "@connectrpc/connect";
import { toConnectError } from "../api/errors.js";
import { writeError } from "../api/rest/error-json.js";
import type { RequestHandler } from "./bind-services.js";
import { guardConnections } from "./connection-guard.js";
import type { ConnectionCounters, ConnectionLimits } from "./connection-limits.js";
import type { ControlPlaneOptions } from "./options.js";
import { badRequestTarget } from "./request-target.js";
import type { ResourceStack } from "./resource-stack.js";
import type { TlsMaterial } from "./tls-material.js";

/** Where a listening control plane answers. */
export interface Listener {
  readonly url: string;
  readonly port: number;
  /** What the connection limits cut, and clients that left early. */
  readonly counters: ConnectionCounters;
}

/**
 * Serves `handler` over HTTP/2 with mutual TLS on the options' host and port, within `limits` (see
 * guardConnections), and registers the server on `stack`. Closing stops accepting, sends every
 * session a GOAWAY, calls `endRequests` (requests that would otherwise stay open, such as runner watches and
 * followers, end there), then waits for the sessions to end; any still open after 5 s are
 * destroyed.
 */
export async function listen(
  options: ControlPlaneOptions,
  tls: TlsMaterial,
  limits: ConnectionLimits,
  handler: RequestHandler,
  stack: ResourceStack,
  endRequests: () => Promise<void>,
): Promise<Listener> {
  let watchRequest: (
    req: http2.Http2ServerRequest,
    res: http2.Http2ServerResponse,
  ) => void = () => {};
  const server = http2.createSecureServer(
    {
      // certificate, key, client CA, TLS 1.3 only: reloadable (src/server/tls-material.ts)
      ...tls.contextOptions(),
      requestCert: true,
      // The policy decides per request, with a message; a TLS alert would tell the client nothing.
      rejectUnauthorized: false,
      ALPNProtocols: ["h2"],
      allowHTTP1: false,
      // A 1 MiB request body (an NDJSON stream request) arrives in one flow-control window, so the
      // server stores it with one commit instead of one per 64 KiB window (measured: 3 batches per
      // 66 KB logs request with the default window, 1 with this; about twice the lines/s).
      settings: { initialWindowSize: 1 << 20, maxConcurrentStreams: limits.maxConcurrentStreams },
      handshakeTimeout: limits.handshakeTimeoutMs,
    },
    (req, res) => {
      watchRequest(req, res);
      const bad = badRequestTarget(req.headers[":path"], req.authority);
      if (bad) return writeError(res, new ConnectError(bad, Code.InvalidArgument));
      try {
        handler(req, res);
      } catch (err) {
        // A throw here would end the process: map it as a handler's error is mapped (logged with an
        // incident id).
        writeError(res, toConnectError(err, `${req.method} ${req.headers[":path"]}`));
      }
    },
  );
  const guard = guardConnections(server, limits);
  watchRequest = guard.watchRequest;
  // A TLS client that offered no ALPN gets past the handshake; Node would answer it in plain
  // HTTP/1.0 and keep the socket for 10 s. Close it at once instead.
  server.on("unknownProtocol", (socket) => socket.destroy());
  stack.defer("the TLS reloads", tls.serveOn(server, limits.handshakeTimeoutMs));
  const sessions = new Set<Http2Session>();
  server.on("session", (s: Http2Session) => {
    sessions.add(s);
    s.once("close", () => sessions.delete(s));
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port, options.host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  const host = options.host.includes(":") ? `[${options.host}]` : options.host;
  stack.defer("the HTTP/2 server and its sessions", async () => {
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    for (const s of sessions) s.close();
    try {
      await endRequests(); // ends followers, whose open streams would hold their sessions
    } finally {
      // A session flooded by a client may have stopped reading its socket, and then never sees it
      // close.
      const forced = setTimeout(
        () => (sessions.forEach((s) => s.destroy()), guard.destroyAll()),
        5_000,
      );
      await closed;
      clearTimeout(forced);
    }
  });
  return { url: `https://${host}:${port}`, port, counters: guard.counters };
}
