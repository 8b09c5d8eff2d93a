import http2 from "node:http2";
import { connectionFix, unreachableReason, type TlsSources } from "./failures.js";

/**
 * The TLS material of a runner: read again for every new connection, so a renewed certificate is
 * used on the next handshake.
 */
export interface TlsMaterial {
  readonly ca: string | Buffer;
  readonly cert: string | Buffer;
  readonly key: string | Buffer;
}

/** A reply from the control plane: any HTTP status (errors are decided by the caller). */
export interface RestReply {
  readonly status: number;
  /** The reply's headers (a stream refusal names the last accepted sequence in one). */
  readonly headers: http2.IncomingHttpHeaders;
  readonly text: string;
  /** The body parsed as JSON; undefined when empty or not JSON. */
  readonly json: unknown;
}

/**
 * The request never got an HTTP answer: connection refused or reset, TLS
 * failure, timeout. Worth retrying (the control plane may be restarting)
 * unless it has a `fix`: a server the runner cannot verify, or TLS files it
 * cannot use, fail the same way every time (failures.ts decides).
 */
export class TransportError extends Error {
  /** What the operator must change first; set when no retry can succeed. */
  readonly fix: string | undefined;
  constructor(message: string, options?: { cause?: unknown; fix?: string }) {
    super(options?.fix ?? message, options);
    this.name = "TransportError";
    this.fix = options?.fix;
  }
}

/** Options of a transport. */
export interface RestTransportOptions {
  /**
   * A session is replaced after this long (5 min by default), so a renewed certificate is presented
   * well before the old one expires.
   */
  readonly maxSessionAgeMs?: number;
  /**
   * Named in the message of a failure no retry cures (a CA bundle that does not sign the server's
   * certificate).
   */
  readonly sources?: TlsSources;
}

/** Options of one request. */
interface RequestOptions {
  /** Give up (TransportError) after this long; 15 s by default. */
  readonly timeoutMs?: number;
  readonly signal?: AbortSignal;
  /** "application/json" unless given (NDJSON bodies pass their own). */
  readonly contentType?: string;
}

/** HTTP/2 + TLS to the control plane on one connection, reopened when it closes. */
export interface RestTransport {
  /** Sends `body` (a string is sent as it is, anything else as JSON). */
  request(
    method: string,
    path: string,
    body?: unknown,
    options?: RequestOptions,
  ): Promise<RestReply>;
  /** The next request opens a new session (a new handshake, e.g. with a renewed certificate). */
  reconnect(): void;
  /**
   * Where the TLS material came from, when the caller said: named in what a refusal tells the
   * operator to fix.
   */
  readonly sources: TlsSources | undefined;
  close(): Promise<void>;
}

/**
 * A transport to `baseUrl` with client certificates from `tls()`. One HTTP/2
 * session carries every request (claims, renewals and streams multiplex);
 * when the server goes away (restart, GOAWAY, network error) the next
 * request opens a new session with freshly read TLS material. A session is
 * also replaced after `maxSessionAgeMs` (5 min by default), so a certificate
 * renewed on disk is presented on a new handshake well before the old one
 * expires; requests in flight finish on the old session.
 */
export function createRestTransport(
  baseUrl: string,
  tls: () => TlsMaterial | Promise<TlsMaterial>,
  settings: RestTransportOptions = {},
): RestTransport {
  const maxSessionAgeMs = settings.maxSessionAgeMs ?? 5 * 60_000;
  const server = new URL(baseUrl);
  /**
   * The one place a failed connection or stream becomes a TransportError: final (with its fix) or
   * transient.
   */
  const failure = (message: string, cause: unknown) => {
    const fix = connectionFix(cause, server, settings.sources);
    return new TransportError(message, { cause, fix });
  };
  let session: http2.ClientHttp2Session | undefined;
  let openedAt = 0;
  let opening: Promise<http2.ClientHttp2Session> | undefined;
  let closed = false;

  const open = async (): Promise<http2.ClientHttp2Session> => {
    const material = await tls();
    const s = http2.connect(baseUrl, {
      ca: material.ca,
      cert: material.cert,
      key: material.key,
      minVersion: "TLSv1.3",
    });
    const forget = () => {
      if (session === s) session = undefined;
    };
    s.on("error", forget); // each request sees its own error
    s.on("close", forget);
    s.on("goaway", forget); // streams already open finish; new ones go to a new session
    session = s;
    openedAt = Date.now();
    return s;
  };

  const current = async () => {
    if (closed) throw new TransportError("the transport is closed");
    if (session && !session.closed && !session.destroyed) {
      if (Date.now() - openedAt < maxSessionAgeMs) return session;
      const old = session;
      session = undefined;
      old.close(); // graceful: open streams (a long-poll claim) complete first
    }
    opening ??= open().finally(() => (opening = undefined));
    return opening;
  };

  return {
    sources: settings.sources,
    reconnect() {
      openedAt = 0;
    },
    async request(method, path, body, options = {}) {
      const payload =
        body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body);
      let s: http2.ClientHttp2Session;
      try {
        s = await current();
      } catch (err) {
        throw err instanceof TransportError
          ? err
          : failure(
              unreachableReason(err, server) ??
                `cannot connect to ${baseUrl}: ${(err as Error).message}`,
              err,
            );
      }
      return new Promise<RestReply>((resolve, reject) => {
        const headers: http2.OutgoingHttpHeaders = { ":method": method, ":path": path };
        if (payload !== undefined)
          headers["content-type"] = options.contentType ?? "application/json";
        let stream: http2.ClientHttp2Stream;
        try {
          stream = s.request(headers);
        } catch (err) {
          if (session === s) session = undefined;
          reject(failure(`${method} ${path}: ${(err as Error).message}`, err));
          return;
        }
        const chunks: Buffer[] = [];
        let status = 0;
        let replyHeaders: http2.IncomingHttpHeaders = {};
        const fail = (why: string, cause?: unknown) => {
          cleanup();
          if (!stream.closed) stream.close(http2.constants.NGHTTP2_CANCEL);
          reject(failure(`${method} ${path}: ${why}`, cause));
        };
        const timer = setTimeout(
          () => fail(`no answer within ${options.timeoutMs ?? 15_000} ms`),
          options.timeoutMs ?? 15_000,
        );
        const onAbort = () => fail("aborted");
        options.signal?.addEventListener("abort", onAbort, { once: true });
        const cleanup = () => {
          clearTimeout(timer);
          options.signal?.removeEventListener("abort", onAbort);
        };
        stream.on("response", (h) => {
          status = Number(h[":status"]);
          replyHeaders = h;
        });
        stream.on("data", (c: Buffer) => chunks.push(c));
        stream.on("error", (err) => fail(unreachableReason(err, server) ?? err.message, err));
        stream.on("close", () => {
          if (status === 0) fail(`the stream closed without a reply (code ${stream.rstCode})`);
        });
        stream.on("end", () => {
          cleanup();
          const text = Buffer.concat(chunks).toString("utf8");
          resolve({ status, headers: replyHeaders, text, json: jsonOrUndefined(text) });
        });
        if (options.signal?.aborted) onAbort();
        else stream.end(payload);
      });
    },
    async close() {
      closed = true;
      const s = session ?? (await opening?.catch(() => undefined));
      session = undefined;
      if (s && !s.closed) await new Promise<void>((resolve) => s.close(() => resolve()));
    },
  };
}

/**
 * A reply body as JSON, or undefined when it is empty or not JSON (the status then says what
 * happened).
 */
export function jsonOrUndefined(text: string): unknown {
  try {
    return text ? JSON.parse(text) : undefined;
  } catch {
    return undefined;
  }
}
