import {
  connect as http2Connect,
  constants,
  type ClientHttp2Session,
  type ClientHttp2Stream,
  type OutgoingHttpHeaders,
} from "node:http2";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Endpoint } from "../../cli/connection.js";
import { writeRefusal } from "./security.js";

/**
 * The request headers a Connect call needs; everything else the browser sends (cookies, its user
 * agent, ...) stays behind.
 */
const forwardedRequestHeaders = [
  "content-type",
  "content-length",
  "content-encoding",
  "accept",
  "accept-encoding",
  "connect-protocol-version",
  "connect-timeout-ms",
  "connect-content-encoding",
  "connect-accept-encoding",
  "last-event-id",
];
/**
 * Response headers that belong to one hop (or that the browser must not keep from the control
 * plane).
 */
const droppedResponseHeaders = new Set([
  "connection",
  "keep-alive",
  "transfer-encoding",
  "set-cookie",
  "strict-transport-security",
  "alt-svc",
  "cache-control",
]);

/** The header carrying a person's session credential to the control plane (src/api/guard.ts). */
const onBehalfOfHeader = "forelead-on-behalf-of";

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
  /**
   * Forwards one call; with `onBehalfOf` (a single sign-on session's credential) the control
   * plane decides it as that session's person (the forelead-on-behalf-of header).
   */
  handle(
    req: IncomingMessage,
    res: ServerResponse,
    path: string,
    query: string,
    onBehalfOf?: string,
  ): void;
  close(): void;
}

export function createProxy(endpoint: Endpoint): Proxy {
  const base = new URL(endpoint.baseUrl);
  const prefix = base.pathname.replace(/\/$/, "");
  let session: ClientHttp2Session | undefined;
  const open = (): ClientHttp2Session => {
    if (session && !session.closed && !session.destroyed) return session;
    const s = http2Connect(base.origin, {
      ca: endpoint.ca,
      cert: endpoint.cert,
      key: endpoint.key,
      minVersion: "TLSv1.3",
    });
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
    handle(req, res, path, query, onBehalfOf) {
      const m = rpcPath.exec(path);
      if (!m) {
        writeRefusal(res, {
          status: 404,
          code: "not_found",
          message:
            `dashboard: ${path} is not an API path; calls go to ` +
            `/api/<package.Service>/<Method>, e.g. ` +
            `/api/forelead.admin.v1.StatusService/GetStatus`,
        });
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
      // Only the session's own credential is sent: a browser's forelead-on-behalf-of is not in
      // forwardedRequestHeaders, so nobody names another person's session through the dashboard.
      if (onBehalfOf !== undefined) headers[onBehalfOfHeader] = onBehalfOf;
      // The browser may go away at any point (a page closed, a stream aborted, the dashboard
      // stopping): from then on nothing is written to it.
      let gone = false;
      const unreachable = (err: Error) => {
        if (gone) return;
        if (res.headersSent) {
          res.destroy(err);
          return;
        }
        // A stream cancelled because its session failed carries the session's error (ECONNREFUSED,
        // a TLS alert) as its cause; a stream the control plane reset has none.
        const cause = (err.cause instanceof Error ? err.cause : err) as NodeJS.ErrnoException;
        const message =
          cause.code === "ERR_HTTP2_STREAM_ERROR"
            ? `the control plane at ${base.origin} reset the call (${cause.message}); ` +
              `try again, and see its log if it persists`
            : `cannot reach the control plane at ${base.origin}: ${cause.code ?? cause.message}`;
        writeRefusal(res, { status: 502, code: "unavailable", message: `dashboard: ${message}` });
      };
      let stream: ClientHttp2Stream;
      try {
        stream = open().request(headers);
      } catch (err) {
        unreachable(err as Error);
        return;
      }
      // The reply's body is read only once its headers are written (node:http2 emits 'response' a
      // tick after the headers arrive), so nothing but the control plane's status can start the
      // browser's reply; and headers that come after the reply has begun are dropped, not set: CI
      // at e0292c7 saw them throw ERR_HTTP_HEADERS_SENT out of this handler, uncaught. Piping
      // carries the browser's pace back to the control plane.
      stream.on("response", (h) => {
        if (gone || res.headersSent) return;
        const status = Number(h[constants.HTTP2_HEADER_STATUS] ?? 502);
        for (const [name, value] of Object.entries(h)) {
          if (name.startsWith(":") || droppedResponseHeaders.has(name) || value === undefined)
            continue;
          // The dashboard's own headers (its security headers, security.ts) are set already and
          // are never replaced by the control plane's reply.
          if (res.hasHeader(name)) continue;
          res.setHeader(name, value);
        }
        res.setHeader("Cache-Control", "no-store");
        res.writeHead(status);
        res.flushHeaders();
        stream.pipe(res);
      });
      stream.on("error", unreachable);
      // A call the control plane closed without replying (a reset with no error code) is a refusal
      // too, never an empty 200.
      stream.on("close", () => {
        if (gone || res.headersSent) return;
        writeRefusal(res, {
          status: 502,
          code: "unavailable",
          message:
            `dashboard: the control plane at ${base.origin} closed the call without ` +
            `a reply (HTTP/2 code ${stream.rstCode ?? "none"}); try again, and see ` +
            `its log if it persists`,
        });
      });
      res.on("close", () => {
        gone = true;
        // The browser went away: stop the call on the control plane too.
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
