import {
  constants as http2Constants,
  type Http2SecureServer,
  type Http2ServerRequest,
  type Http2ServerResponse,
  type Http2Session,
  type ServerHttp2Stream,
} from "node:http2";
import type { Socket } from "node:net";
import type { TLSSocket } from "node:tls";
import { bodyStalledError } from "../api/body-stall.js";
import { resetAfterEndStream } from "../api/rest/stream-end.js";
import type { ConnectionCounters, ConnectionLimits } from "./connection-limits.js";
import { peerCertificate } from "./peer-certificate.js";

/**
 * Less than this in one body window counts as no progress: a body dripped a few bytes at a time is
 * a stall.
 */
const minProgressBytes = 1024;

/**
 * Counts the complete lines of an NDJSON body as it arrives: a line ended by "\n" with at least
 * one byte before it (a bare newline is no message).
 */
function createLineCounter(): (chunk: Buffer) => number {
  let partial = false;
  return (chunk) => {
    let lines = 0;
    let from = 0;
    for (let at = chunk.indexOf(10); at !== -1; at = chunk.indexOf(10, from)) {
      if (at > from || partial) lines++;
      partial = false;
      from = at + 1;
    }
    if (from < chunk.length) partial = true;
    return lines;
  };
}

/** The listener's side of the connection limits: counters, and the per-request body watch. */
export interface ConnectionGuard {
  readonly counters: ConnectionCounters;
  /** Destroys every client connection (shutdown, after the grace period). */
  destroyAll(): void;
  /**
   * Watches one request: ends its body with bodyStalledError once it makes no
   * progress for the bound, and counts a reset that comes before its reply.
   */
  watchRequest(req: Http2ServerRequest, res: Http2ServerResponse): void;
}

/**
 * Puts `limits` on `server`'s connections (the TLS handshake timeout and
 * SETTINGS_MAX_CONCURRENT_STREAMS are server options; see listen): a cap on
 * connections per client address, checked at accept before any TLS work; a
 * small stream allowance and small windows for a connection without a client
 * certificate (it can only enroll); GOAWAY for a connection with no open
 * stream for the idle bound; every RST_STREAM(NO_ERROR) after its reply's
 * END_STREAM; and counters of what each limit cut, and of clients that left.
 */
export function guardConnections(
  server: Http2SecureServer,
  limits: ConnectionLimits,
): ConnectionGuard {
  const counters = {
    prematureCloses: 0,
    stalledBodies: 0,
    handshakeTimeouts: 0,
    refusedConnections: 0,
    idleConnectionsClosed: 0,
  };
  const perAddress = new Map<string, number>();
  // The TCP sockets by peer: a session's socket is a proxy that cannot be destroyed.
  const sockets = new Map<string, Socket>();
  const socketOf = (session: Http2Session) =>
    sockets.get(`${session.socket?.remoteAddress}:${session.socket?.remotePort}`);
  server.on("connection", (socket: Socket) => {
    const address = socket.remoteAddress ?? "";
    const open = (perAddress.get(address) ?? 0) + 1;
    if (open > limits.maxConnectionsPerAddress) {
      counters.refusedConnections++;
      socket.destroy();
      return;
    }
    perAddress.set(address, open);
    const peer = `${address}:${socket.remotePort}`;
    sockets.set(peer, socket);
    socket.once("close", () => {
      sockets.delete(peer);
      const left = (perAddress.get(address) ?? 1) - 1;
      if (left > 0) perAddress.set(address, left);
      else perAddress.delete(address);
    });
  });
  server.on("tlsClientError", (err: NodeJS.ErrnoException) => {
    if (err.code === "ERR_TLS_HANDSHAKE_TIMEOUT") counters.handshakeTimeouts++;
  });
  server.on("session", (session: Http2Session) => {
    const certless = peerCertificate(session.socket as TLSSocket) === undefined;
    // A certificate-less client may only enroll (the guard refuses the rest before any body byte):
    // a few streams and the default 64 KiB windows bound what it can make the server hold.
    if (certless)
      session.settings({
        maxConcurrentStreams: limits.certlessMaxStreams,
        initialWindowSize: 65_535,
      });
    // the connection's window: a runner's streams of several leases share it
    else session.setLocalWindowSize(4 << 20);
    let open = 0;
    let idle: NodeJS.Timeout | undefined;
    const armIdle = () => {
      idle = setTimeout(() => {
        counters.idleConnectionsClosed++;
        session.close();
        // A session a client flooded may have stopped reading, and would wait forever for its
        // socket.
        setTimeout(() => (session.destroy(), socketOf(session)?.destroy()), 5_000).unref();
      }, limits.idleConnectionMs).unref();
    };
    armIdle();
    session.once("close", () => clearTimeout(idle));
    session.on("stream", (stream: ServerHttp2Stream) => {
      if (certless && open >= limits.certlessMaxStreams) {
        stream.close(http2Constants.NGHTTP2_REFUSED_STREAM); // a client ignoring our SETTINGS
        return;
      }
      open++;
      clearTimeout(idle);
      resetAfterEndStream(stream);
      stream.once("close", () => {
        if (--open === 0 && !session.closed) armIdle();
      });
    });
  });

  return {
    counters,
    destroyAll: () => sockets.forEach((socket) => socket.destroy()),
    watchRequest(req, res) {
      const stream = req.stream;
      // Bytes that reached the request (compat's stream reader pushes each chunk into it), and of
      // an NDJSON body its complete messages.
      let received = 0;
      let messages = 0;
      const countLines = /ndjson/i.test(req.headers["content-type"] ?? "")
        ? createLineCounter()
        : undefined;
      const push = req.push.bind(req);
      req.push = (chunk: Buffer | null, encoding?: BufferEncoding) => {
        if (chunk) received += chunk.length;
        if (chunk && countLines) messages += countLines(chunk);
        return push(chunk, encoding);
      };
      let seen = 0;
      let seenMessages = 0;
      let timer: NodeJS.Timeout | undefined;
      // Each window must bring minProgressBytes, a complete NDJSON message (a client sending one
      // line every few seconds is using the stream as meant; bytes that never make a message are
      // still a stall), or the end of the body: a complete body stops the watch, which is why a long-poll claim or a follow (bodies complete, replies pending) is
      // never cut. A stream paused because the server is not reading (yet) is not the client's
      // stall.
      const check = () => {
        if (stream.destroyed || stream.closed || stream.state.remoteClose === 1) return;
        const progressed = received - seen >= minProgressBytes || messages > seenMessages;
        seen = received;
        seenMessages = messages;
        if (progressed || stream.readableFlowing !== true)
          return void (timer = setTimeout(check, limits.bodyIdleMs).unref());
        counters.stalledBodies++;
        // A handler that stopped reading early (a refused first line) no longer listens for the
        // body's errors; the error with no listener would end the process. The client sees the
        // stream reset either way.
        if (req.listenerCount("error") === 0) req.once("error", () => {});
        req.destroy(bodyStalledError(limits.bodyIdleMs));
      };
      timer = setTimeout(check, limits.bodyIdleMs).unref();
      stream.once("close", () => {
        clearTimeout(timer);
        // A reset before the reply was ended, by the client or by its connection's end (ours with
        // an error are INTERNAL_ERROR).
        const code = stream.rstCode ?? http2Constants.NGHTTP2_NO_ERROR;
        if (
          !res.writableEnded &&
          code !== http2Constants.NGHTTP2_NO_ERROR &&
          code !== http2Constants.NGHTTP2_INTERNAL_ERROR
        )
          counters.prematureCloses++;
      });
    },
  };
}
