import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { mkdir, rm } from "node:fs/promises";
import { dirname } from "node:path";
import { Command } from "commander";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import * as oidc from "openid-client";
import { LoginService } from "../../gen/forelead/admin/v1/session_pb.js";
import { writeFileAtomic } from "../identity/pki-files.js";
import { providerUrl } from "../identity/sso.js";
import { createKeyAndCsr } from "../runner/identity/enrollment.js";
import {
  loginCertificatePaths,
  resolveServer,
  withAdminClientOptions,
  type AdminClientFlags,
} from "./connection.js";

interface LoginFlags extends AdminClientFlags {
  readonly ssoIssuer: string;
  readonly clientId: string;
  readonly scope: string;
  readonly device?: boolean;
}

/** How long `forelead login` waits for the browser or the device to finish. */
const signInTimeoutMs = 10 * 60_000;

/**
 * `forelead login` and `forelead logout` (their descriptions are main.ts's). Login signs a person in at the provider as a public client (PKCE, no secret) and
 * trades the ID token, with a new key's CSR, for a short-lived certificate of
 * `spiffe://<td>/users/<segment>`, kept 0600 in the user's config directory and used by every
 * command given no certificate. `forelead logout` deletes it.
 */
export function loginCommands(): Command[] {
  const login = withAdminClientOptions(
    new Command("login")
      .requiredOption("--sso-issuer <url>", "the provider (serve's --sso-issuer)")
      .requiredOption("--client-id <id>", "the CLI's public client (serve's --sso-cli-client-id)")
      .option("--scope <scopes>", "scopes to ask for", "openid email profile")
      .option("--device", "sign in on another device (device authorization flow)"),
  ).action(async (flags: LoginFlags) => {
    const config = await discover(flags);
    const signedIn = flags.device
      ? await deviceSignIn(config, flags)
      : await browserSignIn(config, flags);
    const paths = loginCertificatePaths();
    const { keyPem, csrPem } = await createKeyAndCsr("forelead-login");
    const { baseUrl, ca } = await resolveServer(flags);
    const sessionManager = new Http2SessionManager(baseUrl, {}, { ca });
    try {
      const client = createClient(
        LoginService,
        createConnectTransport({ baseUrl, httpVersion: "2", nodeOptions: { ca }, sessionManager }),
      );
      const reply = await client.login({
        apiVersion: "v1",
        idToken: signedIn.idToken,
        nonce: signedIn.nonce,
        csr: csrPem,
      });
      await mkdir(dirname(paths.cert), { recursive: true, mode: 0o700 });
      await writeFileAtomic(paths.key, keyPem, 0o600);
      await writeFileAtomic(paths.cert, reply.certificateChain, 0o600);
      const until = reply.notAfter ? timestampDate(reply.notAfter).toISOString() : "?";
      console.log(
        `signed in as ${reply.person} (${JSON.stringify(reply.personClaim)}) until ${until}; ` +
          `certificate ${paths.cert}`,
      );
    } finally {
      sessionManager.abort();
    }
  });
  const logout = new Command("logout").action(async () => {
    const paths = loginCertificatePaths();
    await Promise.all([rm(paths.cert, { force: true }), rm(paths.key, { force: true })]);
    console.log(`signed out: removed ${paths.cert} and ${paths.key}`);
  });
  return [login, logout];
}

/** The provider's configuration; plain http is allowed only for a loopback provider (tests). */
async function discover(flags: LoginFlags): Promise<oidc.Configuration> {
  const url = providerUrl(flags.ssoIssuer);
  return oidc.discovery(
    url,
    flags.clientId,
    undefined,
    oidc.None(),
    url.protocol === "http:" ? { execute: [oidc.allowInsecureRequests] } : undefined,
  );
}

/**
 * The authorization code flow with PKCE on a loopback redirect: prints the URL to open (opens
 * nothing), then waits for the provider's redirect.
 */
async function browserSignIn(
  config: oidc.Configuration,
  flags: LoginFlags,
): Promise<{ idToken: string; nonce: string }> {
  const verifier = oidc.randomPKCECodeVerifier();
  const state = oidc.randomState();
  const nonce = oidc.randomNonce();
  let answer: (url: URL) => void = () => undefined;
  const redirected = new Promise<URL>((resolve) => (answer = resolve));
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? "/", redirectUri);
    if (url.pathname !== "/callback") {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { "content-type": "text/plain; charset=utf-8" });
    res.end("forelead: signed in at the provider; you may close this tab.\n");
    answer(url);
  });
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  const redirectUri = `http://127.0.0.1:${(server.address() as AddressInfo).port}/callback`;
  try {
    const url = oidc.buildAuthorizationUrl(config, {
      redirect_uri: redirectUri,
      scope: flags.scope,
      code_challenge: await oidc.calculatePKCECodeChallenge(verifier),
      code_challenge_method: "S256",
      state,
      nonce,
    });
    console.log(`open this URL in a browser to sign in:\n${url.href}`);
    const back = await withTimeout(redirected, "the browser sign-in");
    const tokens = await oidc.authorizationCodeGrant(config, back, {
      pkceCodeVerifier: verifier,
      expectedState: state,
      expectedNonce: nonce,
      idTokenExpected: true,
    });
    return { idToken: tokens.id_token!, nonce };
  } finally {
    server.close();
  }
}

/** The device authorization flow: prints where to go and the code, then polls. */
async function deviceSignIn(
  config: oidc.Configuration,
  flags: LoginFlags,
): Promise<{ idToken: string; nonce: string }> {
  const device = await oidc.initiateDeviceAuthorization(config, { scope: flags.scope });
  console.log(
    `on any device, open ${device.verification_uri_complete ?? device.verification_uri} ` +
      `and enter the code ${device.user_code}`,
  );
  const tokens = await withTimeout(
    oidc.pollDeviceAuthorizationGrant(config, device),
    "the device sign-in",
  );
  if (!tokens.id_token) throw new Error("the provider returned no ID token; ask for scope openid");
  return { idToken: tokens.id_token, nonce: "" };
}

async function withTimeout<T>(promise: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`${what} did not finish in ${signInTimeoutMs / 60_000} minutes`)),
      signInTimeoutMs,
    );
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
