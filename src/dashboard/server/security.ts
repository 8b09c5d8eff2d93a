import type { IncomingMessage, ServerResponse } from "node:http";
import { isIP } from "node:net";

/**
 * The one home of the dashboard's browser-facing security rules: the response
 * headers every reply carries (a strict Content-Security-Policy: scripts and
 * styles only from the dashboard's own files, no inline code, no framing) and
 * the request check (Host and Origin) that keeps other sites out.
 */
export const contentSecurityPolicy = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self'",
  "connect-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join("; ");

/** Sets the security headers on `res`. */
export function setSecurityHeaders(res: ServerResponse): void {
  res.setHeader("Content-Security-Policy", contentSecurityPolicy);
  res.setHeader("X-Content-Type-Options", "nosniff");
  res.setHeader("Referrer-Policy", "no-referrer");
  res.setHeader("X-Frame-Options", "DENY");
  res.setHeader("Cross-Origin-Opener-Policy", "same-origin");
  res.setHeader("Cross-Origin-Resource-Policy", "same-origin");
}

/**
 * Why a request was refused: the Connect error JSON (code and message) the dashboard's pages show
 * like any other refusal.
 */
export interface Refusal {
  readonly status: number;
  readonly code: string;
  readonly message: string;
}

const safeMethods = new Set(["GET", "HEAD", "OPTIONS"]);

/** Where the dashboard is reached: the names its Host may carry and its scheme. */
export interface Reach {
  /** DNS names it answers to (--public-host), besides IP addresses and localhost. */
  readonly publicHosts: readonly string[];
  /** https when it serves TLS or sits behind a TLS proxy (--behind-tls-proxy). */
  readonly scheme: "http" | "https";
}

/**
 * Checks the request's Host and Origin; undefined when it may pass.
 *
 * * Host must be an IP address, `localhost` or a name given with --public-host, in every mode:
 *   any other DNS name pointing at the dashboard is how a rebinding attack looks. The dashboard's
 *   own origin is its scheme + `://` + Host.
 * * A request with an Origin header must come from that origin.
 * * A state-changing request (any method but GET/HEAD/OPTIONS; every Connect
 *   unary call is a POST) must say where it comes from: an Origin header, or
 *   Sec-Fetch-Site: same-origin.
 */
export function checkRequest(req: IncomingMessage, reach: Reach): Refusal | undefined {
  const host = req.headers.host ?? "";
  const hostname = host
    .replace(/:\d+$/, "")
    .replace(/^\[(.*)\]$/, "$1")
    .toLowerCase();
  if (
    !host ||
    (hostname !== "localhost" && isIP(hostname) === 0 && !reach.publicHosts.includes(hostname))
  ) {
    return {
      status: 403,
      code: "permission_denied",
      message:
        `dashboard: Host ${JSON.stringify(host)} is not a name of this dashboard; open it ` +
        `by its address (127.0.0.1, localhost) or by a name given with --public-host (a ` +
        `name not listed is refused so that another site cannot rebind to it)`,
    };
  }
  const own = `${reach.scheme}://${host}`;
  const origin = req.headers.origin;
  if (origin !== undefined && origin !== own) {
    return {
      status: 403,
      code: "permission_denied",
      message: `dashboard: Origin ${origin} is not this dashboard's (${own}); only its own pages may call it`,
    };
  }
  if (
    !safeMethods.has(req.method ?? "GET") &&
    origin === undefined &&
    req.headers["sec-fetch-site"] !== "same-origin"
  ) {
    return {
      status: 403,
      code: "permission_denied",
      message:
        `dashboard: a ${req.method} request must carry an Origin header (${own}) ` +
        `or Sec-Fetch-Site: same-origin; a browser sends them, a script should ` +
        `send Origin`,
    };
  }
  return undefined;
}

/** Writes `refusal` as Connect's error JSON. */
export function writeRefusal(res: ServerResponse, refusal: Refusal): void {
  res.writeHead(refusal.status, {
    "Content-Type": "application/json",
    "Cache-Control": "no-store",
  });
  res.end(JSON.stringify({ code: refusal.code, message: refusal.message }));
}
