import type { IncomingMessage, ServerResponse } from "node:http";
import type { DelegateSessions } from "./delegate.js";
import type { SignInRefusal } from "./refusal-reports.js";
import type { Person, Session } from "./sessions.js";
import { pendingLifetimeMs, SsoRefused, type SsoSignIn } from "./sso.js";

/** Single sign-on as the dashboard runs it: the provider's side and the control plane's. */
export interface SsoMode {
  readonly signIn: SsoSignIn;
  readonly delegate: DelegateSessions;
}

interface SsoRoutesOptions {
  readonly sso: SsoMode;
  /** The scheme of the dashboard's own origin (the callback URL is built from it and Host). */
  readonly scheme: "http" | "https";
  /** The name of the cookie that binds a sign-in to the browser that started it. */
  readonly bindingCookie: string;
  /** Reads a cookie of the request (auth.ts). */
  cookieOf(req: IncomingMessage, name: string): string | undefined;
  /** Starts a dashboard session and sets its cookie (auth.ts). */
  startSession(res: ServerResponse, person: Person, delegation: Session["delegation"]): Session;
  readonly log: (line: string) => void;
  /** Records a refusal in the control plane's audit trail, best effort (refusal-reports.ts). */
  readonly reportRefusal: (refusal: SignInRefusal) => void;
}

type Route = { method: string; run(req: IncomingMessage, res: ServerResponse): void };

/** The path the provider sends the browser back to; register `<origin>/auth/sso/callback`. */
const callbackPath = "/auth/sso/callback";
const pendingSeconds = pendingLifetimeMs / 1000;

/**
 * The single sign-on routes (auth.ts serves them):
 *
 * * `GET /auth/sso/start` — 303 to the provider's authorization URL (state, nonce, PKCE).
 * * `GET /auth/sso/callback` — the provider's redirect back: the code is exchanged (sso.ts), the
 *   ID token handed to the control plane's CreateSession (delegate.ts), and a dashboard session
 *   holding the returned credential starts; 303 to `/`. A refusal is a page saying why, with no
 *   session, no cookie and nothing left open on the control plane.
 */
export function createSsoRoutes(options: SsoRoutesOptions): Record<string, Route> {
  const { sso, log } = options;
  const refuse = (req: IncomingMessage, res: ServerResponse, err: unknown) => {
    const refusal =
      err instanceof SsoRefused
        ? err
        : new SsoRefused(500, "the sign-in failed on the dashboard's side; see its log");
    const from = req.socket.remoteAddress ?? "unknown";
    log(
      `forelead dashboard: refused a single sign-on from ${from}: ` +
        (err instanceof SsoRefused ? err.message : String(err)),
    );
    if (!refusal.auditedThere)
      options.reportRefusal({ method: "sso", reason: refusal.message, clientAddress: from });
    if (res.headersSent) return;
    const body = refusalPage(refusal.message);
    res.writeHead(refusal.status, {
      "Content-Type": "text/html; charset=utf-8",
      "Content-Length": Buffer.byteLength(body),
      "Cache-Control": "no-store",
    });
    res.end(body);
  };
  const redirect = (res: ServerResponse, location: string) => {
    res.writeHead(303, { Location: location, "Cache-Control": "no-store" });
    res.end();
  };
  // Lax, not Strict: it must come with the provider's cross-site redirect back. It is no session:
  // it only says which browser started a sign-in, and lives as long as a pending sign-in.
  const binding = (value: string, maxAge: number) =>
    `${options.bindingCookie}=${value}; Path=/auth/sso/; Max-Age=${maxAge}; HttpOnly; ` +
    `SameSite=Lax${options.scheme === "https" ? "; Secure" : ""}`;
  const start = async (req: IncomingMessage, res: ServerResponse) => {
    const { url, browser } = await sso.signIn.start(
      `${options.scheme}://${req.headers.host}${callbackPath}`,
    );
    res.setHeader("Set-Cookie", binding(browser, pendingSeconds));
    redirect(res, url.href);
  };
  const callback = async (req: IncomingMessage, res: ServerResponse) => {
    const raw = req.url ?? "";
    const query = new URLSearchParams(raw.includes("?") ? raw.slice(raw.indexOf("?") + 1) : "");
    const proof = await sso.signIn.finish(query, options.cookieOf(req, options.bindingCookie));
    const opened = await sso.delegate.open(proof.idToken, proof.nonce);
    options.startSession(res, opened.person, {
      onBehalfOf: opened.credential,
      endsAt: opened.endsAt,
    });
    res.appendHeader("Set-Cookie", binding("", 0));
    log(
      `forelead dashboard: ${opened.person.id} (${JSON.stringify(opened.person.claim)}) signed ` +
        `in from ${req.socket.remoteAddress ?? "unknown"} (single sign-on)`,
    );
    redirect(res, "/");
  };
  const run =
    (handler: (req: IncomingMessage, res: ServerResponse) => Promise<void>) =>
    (req: IncomingMessage, res: ServerResponse) =>
      void handler(req, res).catch((err: unknown) => refuse(req, res, err));
  return {
    "/auth/sso/start": { method: "GET", run: run(start) },
    [callbackPath]: { method: "GET", run: run(callback) },
  };
}

const escapes: Record<string, string> = {
  "&": "&amp;",
  "<": "&lt;",
  ">": "&gt;",
  '"': "&quot;",
  "'": "&#39;",
};

/** The sign-in page's look for a refused sign-in: no script, the reason, a way back. */
function refusalPage(message: string): string {
  const text = message.replace(/[&<>"']/g, (c) => escapes[c]!);
  return (
    `<!doctype html><html lang="en"><head><meta charset="utf-8">` +
    `<title>Sign-in refused - Forelead</title><link rel="stylesheet" href="/app.css"></head>` +
    `<body><main id="main" class="sign-in"><h1>Sign in</h1>` +
    `<div class="error" role="alert" data-code="unauthenticated"><strong>sign-in refused:` +
    `</strong> <span>${text}</span></div>` +
    `<p><a class="sign-in-again" href="/">Sign in again</a></p></main></body></html>`
  );
}
