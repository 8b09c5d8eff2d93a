import { X509Certificate } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Refusal } from "./security.js";
import { writeRefusal } from "./security.js";
import { secretMatches, type Person, type Session, type SessionStore } from "./sessions.js";
import type { SignInToken } from "./sign-in-token.js";
import type { SignInRefusal } from "./refusal-reports.js";
import { createSsoRoutes, type SsoMode } from "./sign-in-sso.js";

/**
 * The dashboard's sign-in and sessions over HTTP: the /auth/ routes, the session cookie and the
 * CSRF header. Every /api/ call needs a session (401 without one) and every state-changing one its
 * session's CSRF token (403 without it); server.ts asks `sessionOf` and `checkCsrf`.
 *
 * * `GET /auth/session` — `{person, csrfToken, expiresAt}` of the cookie's session, or 401.
 * * `POST /auth/sign-in/token` — `{"token": "..."}` (or a form's `token=`): the one-time sign-in
 *   token for a session (sign-in-token.ts); refused when the dashboard signs in with SSO.
 * * `GET /auth/sso/start`, `GET /auth/sso/callback` — single sign-on (sign-in-sso.ts), when
 *   configured; then the only way in.
 * * `POST /auth/sign-out` — ends the session (CSRF header required); its cookie is dead after.
 */
export interface Auth {
  /** Answers a request under /auth/. */
  handle(req: IncomingMessage, res: ServerResponse, path: string): void;
  /** The live session of the request's cookie, or undefined. */
  sessionOf(req: IncomingMessage): Session | undefined;
  /** A refusal unless the request carries `session`'s CSRF token in {@link csrfHeader}. */
  checkCsrf(req: IncomingMessage, session: Session): Refusal | undefined;
  /** Answers a request without a session: 401 with this dashboard's ways to sign in. */
  refuseNotSignedIn(res: ServerResponse): void;
}

/** The request header carrying the session's CSRF token. */
const csrfHeader = "x-forelead-csrf";

export interface AuthOptions {
  readonly sessions: SessionStore;
  /**
   * How people sign in: the local one-time token (the operator's own certificate acts), or
   * single sign-on (the dashboard's certificate is a delegate acting for each person). Never
   * both: a delegate has no power of its own for a token sign-in to use.
   */
  readonly signIn: { readonly token: SignInToken } | { readonly sso: SsoMode };
  /** Who a token sign-in signs in: the operator whose certificate the dashboard holds. */
  readonly operator: Person;
  /** The cookie's name (`__Host-` prefixed when Secure) and whether it is Secure (HTTPS only). */
  readonly cookieName: string;
  readonly secureCookies: boolean;
  /** A line on the dashboard's stderr (never with a secret in it). */
  readonly log: (line: string) => void;
  /** Records a refused sign-in in the control plane's audit trail, best effort, never waited on. */
  readonly reportRefusal: (refusal: SignInRefusal) => void;
}

/** The identity in a PEM client certificate: its SPIFFE ID (URI SAN), else its subject. */
export function personOfCertificate(certPem: string): Person {
  const cert = new X509Certificate(certPem);
  const uri = /(?:^|, )URI:(spiffe:\/\/[^,]+)/.exec(cert.subjectAltName ?? "")?.[1];
  return { id: uri ?? cert.subject.replace(/\n/g, ", "), via: "sign-in token" };
}

/** The cookie's name for a dashboard on `port`: cookies are not kept apart by port, names are. */
export function sessionCookieName(port: number, secure: boolean): string {
  return `${secure ? "__Host-" : ""}forelead-session-${port}`;
}

const notSignedIn: Refusal = {
  status: 401,
  code: "unauthenticated",
  message:
    "dashboard: not signed in (no session, or it ended or was signed out); open the " +
    "dashboard's page in a browser and sign in",
};

/** Marks the dashboard's own 401 (not one of the control plane's): the page signs in again. */
const signedOutHeader = "x-forelead-signed-out";

/** A way to sign in that the sign-in page offers. */
type SignInMethod = "token" | "sso";

/**
 * Answers a request without a session: 401, Connect's error JSON with the ways to sign in
 * (`signIn`: the sign-in page offers those), marked with {@link signedOutHeader}.
 */
function refuseNotSignedIn(res: ServerResponse, methods: readonly SignInMethod[]): void {
  res.writeHead(notSignedIn.status, {
    "Content-Type": "application/json",
    "Cache-Control": "no-store",
    [signedOutHeader]: "1",
  });
  res.end(
    JSON.stringify({ code: notSignedIn.code, message: notSignedIn.message, signIn: methods }),
  );
}

const maxBody = 4096;

/** Reads a small request body; undefined when it is larger than `maxBody`. */
function readBody(req: IncomingMessage): Promise<string | undefined> {
  return new Promise((resolve, reject) => {
    let size = 0;
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => {
      size += c.length;
      if (size <= maxBody) chunks.push(c);
    });
    req.on("end", () =>
      resolve(size > maxBody ? undefined : Buffer.concat(chunks).toString("utf8")),
    );
    req.on("error", reject);
  });
}

/** The sign-in token of a JSON or form body; a string saying what is wrong otherwise. */
function tokenOf(contentType: string, body: string): { token: string } | { problem: string } {
  const type = contentType.split(";")[0]!.trim().toLowerCase();
  let token: unknown;
  if (type === "application/json") {
    try {
      token = (JSON.parse(body) as { token?: unknown } | null)?.token;
    } catch {
      return { problem: "the body is not JSON" };
    }
  } else if (type === "application/x-www-form-urlencoded") {
    token = new URLSearchParams(body).get("token");
  } else {
    return { problem: `send application/json or a form, not ${JSON.stringify(type)}` };
  }
  if (typeof token !== "string" || token.trim() === "")
    return { problem: 'the body has no "token"' };
  return { token: token.trim() };
}

/** The /auth/ routes and the session checks over `options.sessions`. */
export function createAuth(options: AuthOptions): Auth {
  const { sessions, cookieName } = options;
  const token = "token" in options.signIn ? options.signIn.token : undefined;
  const sso = "sso" in options.signIn ? options.signIn.sso : undefined;
  const methods: SignInMethod[] = sso ? ["sso"] : ["token"];
  const refuse = (res: ServerResponse) => refuseNotSignedIn(res, methods);
  const cookieOf = (req: IncomingMessage, name = cookieName): string | undefined => {
    for (const part of (req.headers.cookie ?? "").split(";")) {
      const eq = part.indexOf("=");
      if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
    }
    return undefined;
  };
  const cookieAttributes = `Path=/; HttpOnly; SameSite=Strict${options.secureCookies ? "; Secure" : ""}`;
  const sessionJson = (s: Session) =>
    JSON.stringify({
      person: s.person,
      csrfToken: s.csrfToken,
      expiresAt: new Date(sessions.expiresAt(s)).toISOString(),
    });
  const reply = (res: ServerResponse, status: number, body?: string) => {
    res.setHeader("Cache-Control", "no-store");
    if (body !== undefined) res.setHeader("Content-Type", "application/json");
    res.writeHead(status);
    res.end(body);
  };
  const sessionOf = (req: IncomingMessage) => {
    const value = cookieOf(req);
    return value === undefined ? undefined : sessions.lookup(value);
  };
  const checkCsrf = (req: IncomingMessage, session: Session): Refusal | undefined => {
    const presented = req.headers[csrfHeader];
    if (typeof presented === "string" && secretMatches(presented, session.csrfToken))
      return undefined;
    return {
      status: 403,
      code: "permission_denied",
      message:
        `dashboard: a ${req.method} needs this session's CSRF token in the ${csrfHeader} ` +
        `header (GET /auth/session gives it); it was ${presented === undefined ? "missing" : "wrong"}`,
    };
  };

  /** A new session for `person`, its cookie set on `res`. */
  const startSession = (
    res: ServerResponse,
    person: Person,
    delegation?: Session["delegation"],
  ): Session => {
    const { cookieValue, session } = sessions.createSession(person, delegation);
    res.setHeader("Set-Cookie", `${cookieName}=${cookieValue}; ${cookieAttributes}`);
    return session;
  };

  /** Refuses a token sign-in from `from`: a line on stderr, an audit record, the reply. */
  const refuseToken = (res: ServerResponse, from: string, why: string, refusal: Refusal) => {
    options.log(`forelead dashboard: refused a token sign-in from ${from}: ${why}`);
    options.reportRefusal({ method: "token", reason: why, clientAddress: from });
    writeRefusal(res, refusal);
  };

  const signInWithToken = async (req: IncomingMessage, res: ServerResponse) => {
    const from = req.socket.remoteAddress ?? "unknown";
    if (!token) {
      refuseToken(res, from, "this dashboard signs people in with single sign-on only", {
        status: 403,
        code: "permission_denied",
        message:
          "dashboard: this dashboard signs people in with single sign-on only (it was started " +
          "with --sso-issuer); there is no one-time sign-in token: open its page and choose " +
          "Sign in with SSO (GET /auth/sso/start)",
      });
      return;
    }
    const body = await readBody(req);
    if (body === undefined) {
      refuseToken(res, from, `the body is over ${maxBody} bytes`, {
        status: 413,
        code: "invalid_argument",
        message: `dashboard: a sign-in body is at most ${maxBody} bytes`,
      });
      return;
    }
    const parsed = tokenOf(req.headers["content-type"] ?? "", body);
    if ("problem" in parsed) {
      refuseToken(res, from, parsed.problem, {
        status: 400,
        code: "invalid_argument",
        message: `dashboard: ${parsed.problem}; post {"token": "<the sign-in token>"}`,
      });
      return;
    }
    if (!(await token.redeem(parsed.token))) {
      refuseToken(res, from, "the token is wrong or already used", {
        status: 401,
        code: "unauthenticated",
        message:
          "dashboard: that sign-in token is wrong or already used; the current one is in the " +
          "dashboard's token file (forelead dashboard printed its path where it was started)",
      });
      return;
    }
    const session = startSession(res, options.operator);
    options.log(`forelead dashboard: ${session.person.id} signed in from ${from} (sign-in token)`);
    reply(res, 200, sessionJson(session));
  };

  const signOut = (req: IncomingMessage, res: ServerResponse) => {
    const value = cookieOf(req);
    const session = value === undefined ? undefined : sessions.lookup(value);
    if (!session || value === undefined) {
      refuse(res);
      return;
    }
    const refusal = checkCsrf(req, session);
    if (refusal) {
      writeRefusal(res, refusal);
      return;
    }
    sessions.end(value);
    res.setHeader("Set-Cookie", `${cookieName}=; Max-Age=0; ${cookieAttributes}`);
    const credential = session.delegation?.onBehalfOf;
    if (!credential || !sso) {
      reply(res, 204);
      return;
    }
    // The control plane's session ends with the dashboard's: its credential opens nothing after.
    sso.delegate.end(credential).then(
      () => reply(res, 204),
      (err: unknown) => {
        options.log(
          `forelead dashboard: the control plane could not be told that ${session.person.id} ` +
            `signed out (its session ends by itself at ` +
            `${new Date(session.delegation!.endsAt).toISOString()}): ${String(err)}`,
        );
        reply(res, 204);
      },
    );
  };

  const routes: Record<
    string,
    { method: string; run(req: IncomingMessage, res: ServerResponse): void }
  > = {
    "/auth/session": {
      method: "GET",
      run(req, res) {
        const session = sessionOf(req);
        if (session) reply(res, 200, sessionJson(session));
        else refuse(res);
      },
    },
    "/auth/sign-in/token": {
      method: "POST",
      run(req, res) {
        signInWithToken(req, res).catch((err: unknown) => {
          options.log(`forelead dashboard: a token sign-in failed: ${String(err)}`);
          if (!res.headersSent)
            writeRefusal(res, {
              status: 500,
              code: "internal",
              message: "dashboard: the sign-in failed on the dashboard's side; see its log",
            });
        });
      },
    },
    "/auth/sign-out": { method: "POST", run: signOut },
    ...(sso
      ? createSsoRoutes({
          sso,
          scheme: options.secureCookies ? "https" : "http",
          bindingCookie: cookieName.replace(/^(__Host-)?forelead-session-/, "forelead-sign-in-"),
          cookieOf,
          startSession,
          log: options.log,
          reportRefusal: options.reportRefusal,
        })
      : {}),
  };

  return {
    handle(req, res, path) {
      const route = routes[path];
      if (!route) {
        writeRefusal(res, {
          status: 404,
          code: "not_found",
          message:
            `dashboard: no ${path}; see GET /auth/session, POST /auth/sign-in/token, ` +
            `GET /auth/sso/start, POST /auth/sign-out`,
        });
        return;
      }
      if (req.method !== route.method) {
        res.setHeader("Allow", route.method);
        writeRefusal(res, {
          status: 405,
          code: "unimplemented",
          message: `dashboard: ${path} takes ${route.method}, not ${req.method}`,
        });
        return;
      }
      route.run(req, res);
    },
    sessionOf,
    checkCsrf,
    refuseNotSignedIn: refuse,
  };
}
