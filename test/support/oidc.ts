import { createHash, randomBytes } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { exportJWK, generateKeyPair, type JWK } from "jose";
import Provider from "oidc-provider";

/** A client registered at the test provider. */
export interface TestOidcClient {
  readonly clientId: string;
  /** Unset: a public client (PKCE, no secret), like `forelead login`. */
  readonly secret?: string;
  /**
   * Where the provider may send the browser back; default http://127.0.0.1/callback. On
   * 127.0.0.1 any port is accepted (a native client's loopback rule, RFC 8252).
   */
  readonly redirectUris?: readonly string[];
}

/** A real OpenID provider (oidc-provider 9) on a loopback port, with its dev interactions. */
export interface TestOidcProvider {
  readonly issuer: string;
  /** Sets the lifetime of the ID tokens issued from now on, in seconds. */
  setIdTokenTtl(seconds: number): void;
  /**
   * Signs `login` in as a browser would (the provider's login and consent forms, posted) and
   * returns the ID token the code exchange gives `client`.
   */
  signIn(client: TestOidcClient, login: string, nonce: string): Promise<string>;
  close(): Promise<void>;
}

const redirectUri = "http://127.0.0.1/callback";

/** One signing key, to share between providers (a token of one then differs only by issuer). */
export async function testSigningKey(): Promise<JWK> {
  const { privateKey } = await generateKeyPair("ES256", { extractable: true });
  return { ...(await exportJWK(privateKey)), kid: randomBytes(8).toString("hex"), alg: "ES256" };
}

/**
 * Starts a provider with `clients`; an account's claims are `sub` (its login), `email`
 * (`<login>@example.com`, unless the login holds "@") and `groups` from `groups`.
 */
export async function startTestOidcProvider(options: {
  clients: readonly TestOidcClient[];
  key: JWK;
  groups?: Readonly<Record<string, readonly string[]>>;
  /**
   * The host name of its issuer URL (it listens on 127.0.0.1 either way): `localhost` puts it on
   * another site than a client served from 127.0.0.1, as a real provider is.
   */
  host?: string;
}): Promise<TestOidcProvider> {
  let idTokenTtl = 3600;
  let handler: (req: never, res: never) => void = () => undefined;
  const server: Server = createServer((req, res) => handler(req as never, res as never));
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  const issuer = `http://${options.host ?? "127.0.0.1"}:${(server.address() as AddressInfo).port}`;
  const provider = new Provider(issuer, {
    clients: options.clients.map((c) => ({
      client_id: c.clientId,
      client_secret: c.secret,
      token_endpoint_auth_method: c.secret ? "client_secret_basic" : "none",
      application_type: "native",
      redirect_uris: [...(c.redirectUris ?? [redirectUri])],
      // A public client (the CLI's) may also sign in on another device (`forelead login --device`).
      grant_types: [
        "authorization_code",
        ...(c.secret ? [] : ["urn:ietf:params:oauth:grant-type:device_code"]),
      ],
      response_types: ["code"],
      id_token_signed_response_alg: "ES256",
    })),
    jwks: { keys: [options.key] },
    cookies: { keys: ["test-cookie-key"] },
    claims: { openid: ["sub"], email: ["email"], groups: ["groups"] },
    conformIdTokenClaims: false,
    features: { devInteractions: { enabled: true }, deviceFlow: { enabled: true } },
    ttl: { IdToken: () => idTokenTtl },
    findAccount: (_ctx, id) => ({
      accountId: id,
      claims: () => ({
        sub: id,
        email: id.includes("@") ? id : `${id}@example.com`,
        groups: [...(options.groups?.[id] ?? [])],
      }),
    }),
  });
  handler = provider.callback() as never;
  return {
    issuer,
    setIdTokenTtl: (seconds) => {
      idTokenTtl = seconds;
    },
    signIn: (client, login, nonce) => signIn(issuer, client, login, nonce),
    close: () => new Promise<void>((done) => server.close(() => done())),
  };
}

/** The authorization code flow with PKCE, driven with fetch: redirects followed, forms posted. */
async function signIn(
  issuer: string,
  client: TestOidcClient,
  login: string,
  nonce: string,
): Promise<string> {
  const verifier = randomBytes(32).toString("base64url");
  const challenge = createHash("sha256").update(verifier).digest("base64url");
  const state = randomBytes(8).toString("hex");
  const auth = new URL(`${issuer}/auth`);
  for (const [k, v] of Object.entries({
    client_id: client.clientId,
    response_type: "code",
    scope: "openid email groups",
    redirect_uri: redirectUri,
    nonce,
    state,
    code_challenge: challenge,
    code_challenge_method: "S256",
  }))
    auth.searchParams.set(k, v);
  const back = await followSignIn(auth.toString(), login, (url) => url.startsWith(redirectUri));
  if (back.searchParams.get("state") !== state) throw new Error("state mismatch");
  const code = back.searchParams.get("code");
  if (!code) throw new Error(`no code: ${back.search}`);
  return exchange(issuer, client, code, verifier);
}

/**
 * Plays the browser from `start` (an authorization URL): follows redirects with the provider's
 * cookies and posts its login and consent forms as `login`, until a redirect `leaves` says is the
 * client's; returns that URL, unvisited. With `finished`, a page without a form that it accepts
 * (the device flow's success page) ends it too; its URL is returned.
 */
export async function followSignIn(
  start: string,
  login: string,
  leaves: (url: string) => boolean,
  finished?: (html: string) => boolean,
): Promise<URL> {
  const cookies = new Map<string, string>();
  let url = start;
  let init: RequestInit = {};
  for (let step = 0; step < 20; step++) {
    const res = await fetch(url, {
      ...init,
      redirect: "manual",
      headers: {
        ...(init.headers as Record<string, string> | undefined),
        cookie: [...cookies].map(([k, v]) => `${k}=${v}`).join("; "),
      },
    });
    for (const c of res.headers.getSetCookie()) {
      const [pair] = c.split(";");
      const eq = pair!.indexOf("=");
      cookies.set(pair!.slice(0, eq), pair!.slice(eq + 1));
    }
    const location = res.headers.get("location");
    if (location) {
      const next = new URL(location, url);
      if (leaves(next.toString())) return next;
      url = next.toString();
      init = {};
      continue;
    }
    const html = await res.text();
    const form = /<form[^>]*action="([^"]+)"[^>]*>([\s\S]*?)<\/form>/.exec(html);
    if (!form && finished?.(html)) return new URL(url);
    if (!form) throw new Error(`the provider answered ${res.status} without a form: ${html}`);
    const fields = new URLSearchParams();
    for (const input of form[2]!.matchAll(/<input[^>]*name="([^"]+)"[^>]*>/g)) {
      const name = input[1]!;
      const value = /value="([^"]*)"/.exec(input[0])?.[1];
      fields.set(name, name === "login" ? login : name === "password" ? "any" : (value ?? ""));
    }
    url = new URL(form[1]!.replaceAll("&amp;", "&"), url).toString();
    init = {
      method: "POST",
      body: fields.toString(),
      headers: { "content-type": "application/x-www-form-urlencoded" },
    };
  }
  throw new Error("the sign-in did not leave the provider in 20 steps");
}

async function exchange(
  issuer: string,
  client: TestOidcClient,
  code: string,
  verifier: string,
): Promise<string> {
  const body = new URLSearchParams({
    grant_type: "authorization_code",
    code,
    redirect_uri: redirectUri,
    code_verifier: verifier,
  });
  const headers: Record<string, string> = {
    "content-type": "application/x-www-form-urlencoded",
  };
  if (client.secret)
    headers["authorization"] =
      `Basic ${Buffer.from(`${client.clientId}:${client.secret}`).toString("base64")}`;
  else body.set("client_id", client.clientId);
  const res = await fetch(`${issuer}/token`, { method: "POST", body, headers });
  const json = (await res.json()) as { id_token?: string };
  if (!res.ok || !json.id_token)
    throw new Error(`token exchange: ${res.status} ${JSON.stringify(json)}`);
  return json.id_token;
}
