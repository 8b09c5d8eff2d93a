import { createHash } from "node:crypto";
import http2 from "node:http2";
import type { Http2Session } from "node:http2";
import type { AddressInfo } from "node:net";
import { discoveryDocuments, discoveryPaths } from "../identity/job-tokens/discovery.js";
import type { JobTokenSettings } from "../identity/job-tokens/issue.js";
import { guardConnections } from "./connection-guard.js";
import type { ConnectionCounters, ConnectionLimits } from "./connection-limits.js";
import type { ResourceStack } from "./resource-stack.js";
import type { TlsMaterial } from "./tls-material.js";

/** Where the job-token issuer's discovery listener answers (`serve --job-token-listen`). */
export interface JobTokenListen {
  readonly host: string;
  /** 0 picks a free port. */
  readonly port: number;
}

/** A listening discovery server. */
export interface JobTokenServer {
  /** e.g. https://ci.example:8444 */
  readonly url: string;
  readonly port: number;
  /** What the connection limits cut on this listener. */
  readonly counters: ConnectionCounters;
}

/** Clouds cache the documents this long; a rotated key is published well before it signs. */
const maxAgeSeconds = 300;

/**
 * Serves the issuer's discovery document and JWKS (and nothing else) over HTTPS with the server's
 * certificate, HTTP/1.1 and HTTP/2, without asking for a client certificate: clouds fetch them
 * anonymously with ordinary HTTPS clients. GET and HEAD, with Cache-Control and an ETag. Times
 * are the database's (`nowMs`). The main listener's connection `limits` apply (handshake timeout,
 * per-address cap, streams, idle HTTP/2 connections; see guardConnections; no body is read, so
 * there is no body watch) and its TLS material's one reload path. Registered on `stack`.
 */
export async function serveJobTokenDiscovery(
  listen: JobTokenListen,
  tls: TlsMaterial,
  limits: ConnectionLimits,
  /** The issuer URL is read per request: by default it is this listener's own URL. */
  settings: { readonly issuerUrl: () => string; readonly keys: JobTokenSettings["keys"] },
  nowMs: () => number,
  stack: ResourceStack,
): Promise<JobTokenServer> {
  const server = http2.createSecureServer(
    {
      ...tls.contextOptions(),
      ALPNProtocols: ["h2", "http/1.1"],
      allowHTTP1: true,
      settings: { maxConcurrentStreams: limits.maxConcurrentStreams },
      handshakeTimeout: limits.handshakeTimeoutMs,
    },
    (req, res) => {
      void answer(req, res).catch((err: unknown) => {
        console.error(`job-token discovery: ${req.method} ${req.url}: ${(err as Error).message}`);
        if (!res.headersSent) reply(res, req.method, 500, "no-store", error("internal"));
        else res.destroy();
      });
    },
  );
  async function answer(req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) {
    const issuerUrl = settings.issuerUrl();
    const base = new URL(issuerUrl).pathname.replace(/\/$/, "");
    const paths = new Map([
      [`${base}${discoveryPaths.configuration}`, "configuration" as const],
      [`${base}${discoveryPaths.jwks}`, "jwks" as const],
    ]);
    const path = new URL(req.url ?? "/", "https://issuer.invalid").pathname;
    const which = paths.get(path);
    if (!which)
      return reply(
        res,
        req.method,
        404,
        "no-store",
        error(
          "not_found",
          `no document at ${path}; this listener serves GET ${[...paths.keys()].join(", ")}`,
        ),
      );
    if (req.method !== "GET" && req.method !== "HEAD") {
      res.setHeader("allow", "GET, HEAD");
      return reply(
        res,
        req.method,
        405,
        "no-store",
        error("unimplemented", `${req.method} ${path} is not served; use GET or HEAD`),
      );
    }
    const docs = discoveryDocuments(issuerUrl, await settings.keys(), new Date(nowMs()));
    const body = docs[which];
    const etag = `"${createHash("sha256").update(body).digest("base64url").slice(0, 27)}"`;
    res.setHeader("etag", etag);
    if (req.headers["if-none-match"] === etag)
      return reply(res, req.method, 304, `public, max-age=${maxAgeSeconds}`, undefined);
    reply(res, req.method, 200, `public, max-age=${maxAgeSeconds}`, body);
  }
  const guard = guardConnections(server, limits);
  const stopTls = tls.serveOn(server, limits.handshakeTimeoutMs);
  const sessions = new Set<Http2Session>();
  server.on("session", (s: Http2Session) => {
    sessions.add(s);
    s.once("close", () => sessions.delete(s));
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", (err: NodeJS.ErrnoException) =>
      reject(
        new Error(
          `--job-token-listen ${listen.host}:${listen.port}: cannot listen ` +
            `(${err.code ?? err.message})`,
        ),
      ),
    );
    server.listen(listen.port, listen.host, () => resolve());
  });
  stack.defer("the job-token discovery listener", () => {
    stopTls();
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    // Clouds keep connections alive: a close must not wait for them.
    for (const s of sessions) s.destroy();
    guard.destroyAll();
    return closed;
  });
  const { port } = server.address() as AddressInfo;
  const host = listen.host.includes(":") ? `[${listen.host}]` : listen.host;
  return { url: `https://${host}:${port}`, port, counters: guard.counters };
}

function error(code: string, message = "the document could not be made; see the server log") {
  return JSON.stringify({ code, message });
}

function reply(
  res: http2.Http2ServerResponse,
  method: string | undefined,
  status: number,
  cacheControl: string,
  body: string | undefined,
): void {
  res.writeHead(status, {
    "content-type": "application/json",
    "cache-control": cacheControl,
    ...(body === undefined ? {} : { "content-length": Buffer.byteLength(body) }),
  });
  if (method === "HEAD" || body === undefined) res.end();
  else res.end(body);
}
