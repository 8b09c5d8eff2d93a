import * as oidc from "openid-client";
import { randomSecret, secretMatches } from "./sessions.js";

/** The provider the dashboard signs people in with (`forelead dashboard --sso-*`). */
export interface DashboardSsoOptions {
  /** The provider's issuer URL (the control plane's --sso-issuer). */
  readonly issuer: string;
  /** The dashboard's confidential client (the control plane's --sso-client-id). */
  readonly clientId: string;
  /** The client's secret, read from --sso-client-secret-file; never in argv or a log line. */
  readonly clientSecret: string;
  /** Scopes to ask for; default `openid email profile`. */
  readonly scope?: string;
}

/** Why a single sign-on sign-in was refused: a message for the person (never a code or token). */
export class SsoRefused extends Error {
  constructor(
    readonly status: number,
    message: string,
    /** The control plane refused it and holds its audit record already (CreateSession). */
    readonly auditedThere = false,
  ) {
    super(message);
  }
}

/** A sign-in the browser was sent to the provider for, kept on the dashboard's side. */
interface PendingSignIn {
  /** The value of the browser's binding cookie: the callback must come from that browser. */
  readonly browser: string;
  readonly nonce: string;
  readonly verifier: string;
  readonly redirectUri: string;
  readonly createdAt: number;
}

/** How long a browser has to come back from the provider. */
export const pendingLifetimeMs = 10 * 60_000;
/** At most this many sign-ins wait at once; the oldest is dropped past it. */
const maxPending = 1000;

/** The ID token and the nonce of a finished sign-in, for the control plane's CreateSession. */
interface ProviderProof {
  readonly idToken: string;
  readonly nonce: string;
}

/**
 * The OpenID Connect authorization code flow with PKCE as a confidential client (openid-client).
 * The sign-in state (state, nonce, PKCE verifier) is kept here keyed by `state`, not in a cookie:
 * the provider's redirect back is a cross-site navigation, which a SameSite=Strict cookie would
 * not come with. A state is good once, for {@link pendingLifetimeMs}, and only in the browser that
 * started it: `start` gives a random value for a SameSite=Lax cookie (sent on the provider's
 * top-level redirect back), and `finish` wants it back, so a callback URL someone else got from
 * the provider cannot sign this browser in as them (login CSRF, RFC 6749 section 10.12).
 */
export interface SsoSignIn {
  /**
   * The provider's authorization URL for a new sign-in coming back to `redirectUri`, and the
   * value of the browser's binding cookie.
   */
  start(redirectUri: string): Promise<{ url: URL; browser: string }>;
  /**
   * The provider's proof for the callback's query (`?code&state`, or `?error`) in the browser
   * whose binding cookie holds `browser`; throws SsoRefused naming why (unknown, expired or used
   * state, another browser, the provider's refusal, a code the provider refuses to exchange).
   * The state is spent either way.
   */
  finish(query: URLSearchParams, browser: string | undefined): Promise<ProviderProof>;
}

/** A sign-in with `options`' provider; its discovery document is read on first use. */
export function createSsoSignIn(
  options: DashboardSsoOptions,
  now: () => number = Date.now,
): SsoSignIn {
  const pending = new Map<string, PendingSignIn>();
  let config: Promise<oidc.Configuration> | undefined;
  const configuration = () => {
    config ??= discover(options).catch((err: unknown) => {
      config = undefined; // a provider that was down is asked again on the next sign-in
      throw err;
    });
    return config;
  };
  const sweep = (t: number) => {
    for (const [state, p] of pending)
      if (p.createdAt + pendingLifetimeMs <= t) pending.delete(state);
    while (pending.size >= maxPending) pending.delete(pending.keys().next().value!);
  };
  return {
    async start(redirectUri) {
      const c = await configuration();
      const t = now();
      sweep(t);
      const state = randomSecret();
      const verifier = oidc.randomPKCECodeVerifier();
      const nonce = randomSecret();
      const browser = randomSecret();
      pending.set(state, { browser, nonce, verifier, redirectUri, createdAt: t });
      const url = oidc.buildAuthorizationUrl(c, {
        redirect_uri: redirectUri,
        scope: options.scope ?? "openid email profile",
        code_challenge: await oidc.calculatePKCECodeChallenge(verifier),
        code_challenge_method: "S256",
        state,
        nonce,
      });
      return { url, browser };
    },
    async finish(query, browser) {
      const state = query.get("state") ?? "";
      const signIn = pending.get(state);
      pending.delete(state);
      if (!signIn || signIn.createdAt + pendingLifetimeMs <= now())
        throw new SsoRefused(
          400,
          "this sign-in is unknown, expired or already used (its state does not match one " +
            "the dashboard started); sign in again from the dashboard's page",
        );
      if (browser === undefined || !secretMatches(browser, signIn.browser))
        throw new SsoRefused(
          400,
          "this sign-in was started in another browser (or without its sign-in cookie); sign in " +
            "again from the dashboard's page in this browser",
        );
      const error = query.get("error");
      if (error !== null)
        throw new SsoRefused(
          401,
          `the sign-in provider refused: ${printable(error)}` +
            (query.get("error_description")
              ? ` (${printable(query.get("error_description")!)})`
              : ""),
        );
      const callback = new URL(signIn.redirectUri);
      callback.search = query.toString();
      let tokens;
      try {
        tokens = await oidc.authorizationCodeGrant(await configuration(), callback, {
          pkceCodeVerifier: signIn.verifier,
          expectedState: state,
          expectedNonce: signIn.nonce,
          idTokenExpected: true,
        });
      } catch (err) {
        throw exchangeRefusal(err);
      }
      return { idToken: tokens.id_token!, nonce: signIn.nonce };
    },
  };
}

/** The provider's configuration; plain http only for a loopback provider (tests). */
async function discover(options: DashboardSsoOptions): Promise<oidc.Configuration> {
  const url = new URL(options.issuer);
  try {
    return await oidc.discovery(
      url,
      options.clientId,
      undefined,
      oidc.ClientSecretBasic(options.clientSecret),
      url.protocol === "http:" ? { execute: [oidc.allowInsecureRequests] } : undefined,
    );
  } catch (err) {
    throw new SsoRefused(
      502,
      `the sign-in provider ${options.issuer} could not be reached or read: ${causeOf(err)}`,
    );
  }
}

/** The code exchange's failure as a message: the provider's error code, never the code itself. */
function exchangeRefusal(err: unknown): SsoRefused {
  if (err instanceof oidc.ResponseBodyError)
    return new SsoRefused(
      401,
      `the sign-in provider refused the authorization code (${printable(err.error)}` +
        `${err.error_description ? `: ${printable(err.error_description)}` : ""}); a code ` +
        `works once: sign in again from the dashboard's page`,
    );
  if (err instanceof oidc.AuthorizationResponseError)
    return new SsoRefused(401, `the sign-in provider refused: ${printable(err.error)}`);
  return new SsoRefused(401, `the sign-in could not be completed: ${causeOf(err)}`);
}

/** What went wrong, in openid-client's words (its messages quote no token or code). */
function causeOf(err: unknown): string {
  const e = err as { code?: string; message?: string; cause?: { code?: string } };
  if (e.cause?.code) return printable(e.cause.code);
  const message = e.message ?? String(err);
  return printable(e.code ? `${message} (${e.code})` : message);
}

/** Text from the provider or a query, shortened and without control characters. */
function printable(text: string): string {
  const clean = text.replace(/[^\x20-\x7e]/g, "?");
  return clean.length > 200 ? `${clean.slice(0, 200)}...` : clean;
}
