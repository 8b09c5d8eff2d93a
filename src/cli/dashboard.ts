import { readFile } from "node:fs/promises";
import { Command } from "commander";
import { startDashboard } from "../dashboard/server/server.js";
import { parseListen, parsePublicHost } from "../dashboard/server/listen.js";
import { defaultSessionLifetimes } from "../dashboard/server/sessions.js";
import type { DashboardSsoOptions } from "../dashboard/server/sso.js";
import { providerUrl } from "../identity/sso.js";
import { secondsFlag } from "./admin-flags.js";
import { resolveEndpoint, withAdminClientOptions, type AdminClientFlags } from "./connection.js";

interface DashboardFlags extends AdminClientFlags {
  listen: string;
  allowRemote?: boolean;
  publicHost: string[];
  tlsCert?: string;
  tlsKey?: string;
  behindTlsProxy?: boolean;
  sessionIdle?: number;
  sessionMax?: number;
  signInTokenFile?: string;
  ssoIssuer?: string;
  ssoClientId?: string;
  ssoClientSecretFile?: string;
  ssoScope: string;
}

const collect = (value: string, previous: string[]) => [...previous, parsePublicHost(value)];

/**
 * `forelead dashboard`: src/dashboard/server/server.ts with the connection of
 * src/cli/connection.ts. The one-time sign-in token is written to its file and, when stdout is a
 * terminal, shown there; never in argv, a URL or a log line. With --sso-issuer people sign in
 * with single sign-on instead, and the certificate is the dashboard's delegate identity.
 */
export function dashboardCommand(): Command {
  return withAdminClientOptions(
    new Command("dashboard")
      .option(
        "--listen <host:port>",
        "where to serve it (loopback unless --allow-remote)",
        "127.0.0.1:8080",
      )
      .option(
        "--allow-remote",
        "allow a non-loopback --listen address (needs --public-host and HTTPS)",
      )
      .option(
        "--public-host <name>",
        "a DNS name the dashboard answers to (repeatable); any other Host is refused",
        collect,
        [],
      )
      .option("--tls-cert <file>", "serve HTTPS with this certificate (PEM; with --tls-key)")
      .option("--tls-key <file>", "the key of --tls-cert (PEM)")
      .option(
        "--behind-tls-proxy",
        "a TLS proxy in front serves HTTPS: Secure cookies, https:// origins",
      )
      .option(
        "--session-idle <duration>",
        "end a session not used for this long (default 30m)",
        secondsFlag("--session-idle", { wholeSeconds: true }),
      )
      .option(
        "--session-max <duration>",
        "end a session this long after sign-in (default 12h)",
        secondsFlag("--session-max", { wholeSeconds: true }),
      )
      .option(
        "--sign-in-token-file <file>",
        "where to write the one-time sign-in token (0600; default " +
          "$XDG_STATE_HOME/forelead/dashboard-<port>.token)",
      )
      .option(
        "--sso-issuer <url>",
        "sign people in with this OpenID provider (serve's --sso-issuer) instead of a token; " +
          "the certificate must then be granted delegate",
      )
      .option("--sso-client-id <id>", "the dashboard's client at the provider (serve's too)")
      .option("--sso-client-secret-file <file>", "a file holding that client's secret")
      .option("--sso-scope <scopes>", "scopes to ask the provider for", "openid email profile"),
  ).action(async (flags: DashboardFlags) => {
    const listen = parseListen(flags.listen);
    if ((flags.tlsCert === undefined) !== (flags.tlsKey === undefined))
      throw new Error("--tls-cert and --tls-key go together: give both, or neither");
    const sso = await ssoOptions(flags);
    const endpoint = await resolveEndpoint(flags);
    const tls =
      flags.tlsCert !== undefined && flags.tlsKey !== undefined
        ? { cert: await readFile(flags.tlsCert, "utf8"), key: await readFile(flags.tlsKey, "utf8") }
        : undefined;
    // The token is shown on a terminal only: stdout piped to a file or a log keeps it out.
    const terminal = process.stdout.isTTY === true;
    let started = false;
    let firstToken = "";
    const show = (token: string) => {
      if (!started) firstToken = token;
      else if (terminal) process.stdout.write(`forelead dashboard: next sign-in token: ${token}\n`);
    };
    const dashboard = await startDashboard({
      listen,
      allowRemote: flags.allowRemote ?? false,
      publicHosts: flags.publicHost,
      tls,
      behindTlsProxy: flags.behindTlsProxy ?? false,
      endpoint,
      sessionLifetimes: {
        idleMs: (flags.sessionIdle ?? defaultSessionLifetimes.idleMs / 1000) * 1000,
        maxMs: (flags.sessionMax ?? defaultSessionLifetimes.maxMs / 1000) * 1000,
      },
      signInTokenFile: flags.signInTokenFile,
      onSignInToken: show,
      sso,
    });
    started = true;
    process.stdout.write(
      sso
        ? `forelead dashboard: ${dashboard.url}/ (people sign in with single sign-on at ` +
            `${sso.issuer}; register ${dashboard.url}/auth/sso/callback there; API calls go ` +
            `to ${endpoint.baseUrl} as each person, through this delegate certificate; ` +
            `Ctrl-C stops it)\n`
        : `forelead dashboard: ${dashboard.url}/ (API calls go to ` +
            `${endpoint.baseUrl} with your client certificate; Ctrl-C stops it)\n` +
            `forelead dashboard: sign in with the one-time token in ${dashboard.signInTokenFile}` +
            ` (a new one is written there after each sign-in)\n` +
            (terminal ? `forelead dashboard: sign-in token: ${firstToken}\n` : ""),
    );
    const stop = () => void dashboard.close().then(() => process.exit(0));
    process.once("SIGINT", stop);
    process.once("SIGTERM", stop);
  });
}

/** The --sso-* flags, checked, with the secret read from its file; undefined without them. */
async function ssoOptions(flags: DashboardFlags): Promise<DashboardSsoOptions | undefined> {
  const given = [flags.ssoIssuer, flags.ssoClientId, flags.ssoClientSecretFile];
  if (given.every((f) => f === undefined)) return undefined;
  if (given.some((f) => f === undefined))
    throw new Error(
      "--sso-issuer, --sso-client-id and --sso-client-secret-file go together: give all three, " +
        "or none (then the one-time sign-in token signs the operator in)",
    );
  if (flags.signInTokenFile !== undefined)
    throw new Error(
      "--sign-in-token-file is for the token sign-in; with --sso-issuer there is none",
    );
  providerUrl(flags.ssoIssuer!);
  const clientSecret = (await readFile(flags.ssoClientSecretFile!, "utf8")).trim();
  if (clientSecret === "")
    throw new Error(`--sso-client-secret-file ${flags.ssoClientSecretFile} is empty`);
  return {
    issuer: flags.ssoIssuer!,
    clientId: flags.ssoClientId!,
    clientSecret,
    scope: flags.ssoScope,
  };
}
