import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { createServer as createTlsServer } from "node:https";
import type { AddressInfo } from "node:net";
import type { Endpoint } from "../../cli/connection.js";
import { defaultAssetsDir, loadAssets } from "./assets.js";
import { createAuth, personOfCertificate, sessionCookieName, type Auth } from "./auth.js";
import { createDelegateSessions } from "./delegate.js";
import { checkListen, type ListenAddress } from "./listen.js";
import { createProxy } from "./proxy.js";
import { createRefusalReports } from "./refusal-reports.js";
import { checkRequest, setSecurityHeaders, writeRefusal, type Reach } from "./security.js";
import { createSessionStore, type SessionLifetimes, type SessionStore } from "./sessions.js";
import { createSignInToken, defaultSignInTokenFile, type SignInToken } from "./sign-in-token.js";
import { createSsoSignIn, type DashboardSsoOptions } from "./sso.js";

/** What the dashboard serves, where it forwards, and how people sign in. */
export interface DashboardOptions {
  readonly listen: ListenAddress;
  /** Listen on a non-loopback address; off by default. Needs publicHosts and HTTPS. */
  readonly allowRemote?: boolean;
  /** The DNS names the dashboard answers to besides its addresses (--public-host). */
  readonly publicHosts?: readonly string[];
  /** Serve HTTPS with this certificate and key (PEM) (--tls-cert/--tls-key). */
  readonly tls?: { readonly cert: string; readonly key: string };
  /** A TLS proxy in front serves HTTPS (--behind-tls-proxy): Secure cookies, https origins. */
  readonly behindTlsProxy?: boolean;
  /**
   * The control plane and the certificate the dashboard calls it with (src/cli/connection.ts
   * resolveEndpoint): the operator's, or with `sso` the dashboard's own delegate identity.
   */
  readonly endpoint: Endpoint;
  /**
   * Sign people in with this provider (--sso-issuer, --sso-client-id, --sso-client-secret-file)
   * instead of the one-time token: each acts as themself through the control plane's delegation.
   */
  readonly sso?: DashboardSsoOptions;
  /** The built web app; default dist/dashboard/ of this package. */
  readonly assetsDir?: string;
  /** Session lifetimes (--session-idle, --session-max); defaults in sessions.ts. */
  readonly sessionLifetimes?: SessionLifetimes;
  /**
   * The sessions to keep; default a new store. A dashboard started again with the same store
   * keeps its sessions (the tests restart one under an open page).
   */
  readonly sessions?: SessionStore;
  /** Where the one-time sign-in token is written (0600); default defaultSignInTokenFile(port). */
  readonly signInTokenFile?: string;
  /** Sees each new sign-in token (the command shows it when stdout is a terminal). */
  readonly onSignInToken?: (token: string) => void;
  /** Where the dashboard's lines go (sign-ins, refusals; never a secret); default stderr. */
  readonly log?: (line: string) => void;
}

/** A running dashboard. */
export interface Dashboard {
  /** Its own origin, e.g. http://127.0.0.1:8080. */
  readonly url: string;
  /** The file holding the current one-time sign-in token; undefined with single sign-on. */
  readonly signInTokenFile: string | undefined;
  /** Its sessions (to start it again with the same ones). */
  readonly sessions: SessionStore;
  close(): Promise<void>;
}

/** The files the sign-in page needs: served without a session (they hold no data). */
const publicAssets = new Set(["/index.html", "/app.js", "/app.css", "/favicon.svg"]);

/**
 * Serves the web app (GET of its built files) and forwards /api/<Connect path> to the control
 * plane (proxy.ts), behind the Host/Origin check and with the security headers of security.ts on
 * every reply; nothing but the sign-in page reaches a browser without a session, and every API
 * call needs one (auth.ts). HTTP/1.1, over TLS when given a certificate: the browser needs no
 * client certificate; the operator's is used between the dashboard and the control plane.
 */
export async function startDashboard(options: DashboardOptions): Promise<Dashboard> {
  const publicHosts = options.publicHosts ?? [];
  const behindTlsProxy = options.behindTlsProxy ?? false;
  checkListen(options.listen, {
    allowRemote: options.allowRemote ?? false,
    publicHosts,
    tls: options.tls !== undefined,
    behindTlsProxy,
  });
  const secure = options.tls !== undefined || behindTlsProxy;
  const reach: Reach = { publicHosts, scheme: secure ? "https" : "http" };
  const log = options.log ?? ((line: string) => void process.stderr.write(`${line}\n`));
  const operator = personOfCertificate(options.endpoint.cert);
  const assets = await loadAssets(options.assetsDir ?? defaultAssetsDir());
  const sessions = options.sessions ?? createSessionStore(options.sessionLifetimes);
  const proxy = createProxy(options.endpoint);
  // Set once listening (the cookie's name and the token's file carry the port).
  const ready: { auth?: Auth } = {};
  const serve = (req: IncomingMessage, res: ServerResponse) => {
    setSecurityHeaders(res);
    const refusal = checkRequest(req, reach);
    const auth = ready.auth;
    if (refusal || !auth) {
      writeRefusal(
        res,
        refusal ?? { status: 503, code: "unavailable", message: "dashboard: starting; try again" },
      );
      return;
    }
    const raw = req.url ?? "/";
    const q = raw.indexOf("?");
    const path = q < 0 ? raw : raw.slice(0, q);
    const query = q < 0 ? "" : raw.slice(q);
    if (path.startsWith("/auth/")) {
      auth.handle(req, res, path);
      return;
    }
    const session = auth.sessionOf(req);
    if (path.startsWith("/api/")) {
      if (!session) {
        auth.refuseNotSignedIn(res);
        return;
      }
      const forged =
        req.method === "GET" || req.method === "HEAD" ? undefined : auth.checkCsrf(req, session);
      if (forged) {
        writeRefusal(res, forged);
        return;
      }
      proxy.handle(req, res, path, query, session.delegation?.onBehalfOf);
      return;
    }
    if (req.method !== "GET" && req.method !== "HEAD") {
      res.setHeader("Allow", "GET, HEAD");
      writeRefusal(res, {
        status: 405,
        code: "unimplemented",
        message: `dashboard: ${req.method} ${path}: the pages are read with GET; API calls go to /api/`,
      });
      return;
    }
    const name = path === "/" ? "/index.html" : path;
    const asset = assets.get(name);
    if (!asset) {
      writeRefusal(res, {
        status: 404,
        code: "not_found",
        message: `dashboard: no page ${path}; open / (pages are addressed as /#/overview, /#/runners, ...)`,
      });
      return;
    }
    if (!session && !publicAssets.has(name)) {
      auth.refuseNotSignedIn(res);
      return;
    }
    res.writeHead(200, {
      "Content-Type": asset.contentType,
      "Content-Length": asset.body.length,
      "Cache-Control": "no-cache",
    });
    res.end(req.method === "HEAD" ? undefined : asset.body);
  };
  const server: Server = options.tls
    ? createTlsServer(
        { cert: options.tls.cert, key: options.tls.key, minVersion: "TLSv1.2" },
        serve,
      )
    : createServer(serve);
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.listen.port, options.listen.host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const { address, port, family } = server.address() as AddressInfo;
  // With single sign-on there is no token: the dashboard's certificate is a delegate with no
  // power of its own, so nobody could act through a token sign-in (docs/dashboard.md).
  let signInToken: SignInToken | undefined;
  if (!options.sso)
    try {
      signInToken = await createSignInToken(
        options.signInTokenFile ?? defaultSignInTokenFile(port),
        options.onSignInToken,
      );
    } catch (err) {
      server.close();
      throw err;
    }
  const delegate = options.sso ? createDelegateSessions(options.endpoint) : undefined;
  // A session that runs out at the dashboard ends at the control plane too (sign-out ends both
  // in auth.ts): its credential never outlives it.
  sessions.onExpired((s) => {
    const credential = s.delegation?.onBehalfOf;
    if (!delegate || !credential) return;
    delegate.end(credential).then(
      () => log(`forelead dashboard: the session of ${s.person.id} ran out; ended it`),
      (err: unknown) =>
        log(
          `forelead dashboard: the session of ${s.person.id} ran out, and the control plane ` +
            `could not be told (it ends there by itself): ${String(err)}`,
        ),
    );
  });
  // Refused sign-ins go to the control plane's audit trail too, over the dashboard's certificate.
  const refusals = createRefusalReports(options.endpoint, log);
  ready.auth = createAuth({
    sessions,
    signIn:
      options.sso && delegate
        ? { sso: { signIn: createSsoSignIn(options.sso), delegate } }
        : { token: signInToken! },
    operator,
    cookieName: sessionCookieName(port, secure),
    secureCookies: secure,
    log,
    reportRefusal: (refusal) => refusals.report(refusal),
  });
  const host = family === "IPv6" ? `[${address}]` : address;
  return {
    url: `${options.tls ? "https" : "http"}://${host}:${port}`,
    signInTokenFile: signInToken?.file,
    sessions,
    async close() {
      proxy.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      delegate?.close();
      refusals.close();
      await signInToken?.remove();
    },
  };
}
