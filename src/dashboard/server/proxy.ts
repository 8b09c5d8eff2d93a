import { connect as http2Connect, constants, type ClientHttp2Session, type OutgoingHttpHeaders } from "node:http2";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Endpoint } from "../../cli/connection.js";
import { writeRefusal } from "./security.js";

/** The request headers a Connect call needs; everything else the browser sends (cookies, its user agent, ...) stays behind. */
const forwardedRequestHeaders = ["content-type", "content-length", "content-encoding", "accept", "accept-encoding", "connect-protocol-version", "connect-timeout-ms", "connect-content-encoding", "connect-accept-encoding", "last-event-id"];
/** Response headers that belong to one hop (or that the browser must not keep from the control plane). */
const droppedResponseHeaders = new Set(["connection", "keep-alive", "transfer-encoding", "set-cookie", "strict-transport-security", "alt-svc"]);

/** The path of one RPC: /api/<package.Service>/<Method>. */
const rpcPath = /^\/api(\/[A-Za-z_][A-Za-z0-9_.]*\/[A-Za-z_][A-Za-z0-9_]*)$/;

/**
 * Forwards `/api/<Connect path>` to the control plane over HTTP/2 + TLS with
 * the operator's client certificate (kubectl proxy's way): the control plane
 * sees the operator's identity, applies its roles and writes its audit trail
 * as for any CLI call. One HTTP/2 session, opened on first use and again after
 * it closes; the request and the reply stream through, so server-streaming
 * calls (events, logs) arrive as they are sent.
 */
export interface Proxy {
  handle(req: IncomingMessage, res: ServerResponse, path: string, query: string): void;
  close(): void;
}

export function createProxy(endpoint: Endpoint): Proxy {
  const base = new URL(endpoint.baseUrl);
  const prefix = base.pathname.replace(/\/$/, "");
  let session: ClientHttp2Session | undefined;
  const open = (): ClientHttp2Session => {
    if (session && !session.closed && !session.destroyed) return session;
    const s = http2Connect(base.origin, { ca: endpoint.ca, cert: endpoint.cert, key: endpoint.key, minVersion: "TLSv1.3" });
    s.on("error", () => {
      if (session === s) session = undefined;
    });
    s.on("close", () => {
      if (session === s) session = undefined;
    });
    s.on("goaway", () => {
      if (session === s) session = undefined;
    });
    s.unref();
    session = s;
    return s;
  };
  return {
    handle(req, res, path, query) {
      const m = rpcPath.exec(path);
      if (!m) {
        writeRefusal(res, { status: 404, code: "not_found", message: `dashboard: ${path} is not an API path; calls go to /api/<package.Service>/<Method>, e.g. /api/forelead.admin.v1.StatusService/GetStatus` });
        return;
      }
      const headers: OutgoingHttpHeaders = {
        [constants.HTTP2_HEADER_METHOD]: req.method ?? "GET",
        [constants.HTTP2_HEADER_PATH]: `${prefix}${m[1]}${query}`,
        "user-agent": "forelead-dashboard",
      };
      for (const name of forwardedRequestHeaders) {
        const value = req.headers[name];
        if (value !== undefined) headers[name] = value;
      }
      const unreachable = (err: Error) => {
        if (res.headersSent) {
          res.destroy(err);
          return;
        }
        // A stream cancelled because its session failed carries the session's error (ECONNREFUSED, a TLS alert) as its cause.
        const cause = (err.cause instanceof Error ? err.cause : err) as NodeJS.ErrnoException;
        writeRefusal(res, { status: 502, code: "unavailable", message: `dashboard: cannot reach the control plane at ${base.origin}: ${cause.code ?? cause.message}` });
      };
      let stream;
      try {
        stream = open().request(headers);
      } catch (err) {
        unreachable(err as Error);
        return;
      }
      stream.on("response", (h) => {
        const status = Number(h[constants.HTTP2_HEADER_STATUS] ?? 502);
        for (const [name, value] of Object.entries(h)) {
          if (name.startsWith(":") || droppedResponseHeaders.has(name) || value === undefined) continue;
          res.setHeader(name, value);
        }
        res.setHeader("Cache-Control", "no-store");
        res.writeHead(status);
        res.flushHeaders();
      });
      stream.on("data", (chunk: Buffer) => res.write(chunk));
      stream.on("end", () => res.end());
      stream.on("error", unreachable);
      // The browser went away (a page closed, a stream aborted): stop the call on the control plane too.
      res.on("close", () => {
        if (!stream.closed) stream.close(constants.NGHTTP2_CANCEL);
      });
      req.pipe(stream);
    },
    close() {
      session?.close();
      session = undefined;
    },
  };
}
