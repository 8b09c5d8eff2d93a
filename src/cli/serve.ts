import { defaultRunnerOfflineSeconds } from "../broker/fleet/state.js";
import { resolve } from "node:path";
import { setFlagsFromString } from "node:v8";
import { Command, InvalidArgumentError, Option } from "commander";
import { defaultMaxArtifactBytes } from "../artifacts/artifacts.js";
import { defaultJobTimeouts } from "../broker/jobs/rules.js";
import { isPostgresUrl } from "../store/database.js";
import { parseDuration } from "../identity/ca.js";
import { defaultMaxLifetimeMs, formatDuration } from "../identity/certificate-policy.js";
import { devPkiPaths, initDevPki, readNamedFile } from "../identity/pki-files.js";
import {
  checkServiceIdentity,
  describeGrant,
  parseGroupGrant,
  parseRoleGrant,
} from "../identity/roles.js";
import { providerUrl, type SsoOptions } from "../identity/sso.js";
import { describeIdentity } from "../identity/person.js";
import { parseSpiffeId } from "../identity/spiffe.js";
import { defaultConnectionLimits } from "../server/connection-limits.js";
import { startControlPlane, type ControlPlaneOptions } from "../server/control-plane.js";
import { checkServe } from "../server/serve-check.js";
import type { DoctorCheck } from "../ops/doctor.js";
import { reportChecks } from "./doctor.js";
import { readTlsFiles, type TlsFiles, type TlsPems } from "../server/tls-material.js";
import { defaultHosts } from "./ca.js";
import { collect, integerIn, pathOption } from "./options.js";
import { parseRateLimitFlag } from "../broker/jobs/rate-limits.js";
import { secondsFlag } from "./admin-flags.js";
import { applyServeConfig } from "./config.js";
import { addRetentionOptions, retentionsFromFlags } from "./retention-flags.js";
import {
  checkPortsFree,
  defaultArtifactsDir,
  defaultAuditSpoolDir,
  loadSecretsKeys,
  serveDatabase,
  sharedSpoolRoot,
  warnOfOldPlaces,
} from "./serve-data.js";

interface ServeFlags {
  listen: string;
  jobTokenKey?: string;
  jobTokenListen?: string;
  jobTokenIssuerUrl?: string;
  jobTokenMaxLifetime?: number;
  jobTokenSubject?: string;
  metricsListen: string;
  tlsCert?: string;
  tlsKey?: string;
  clientCa?: string;
  certsDir: string;
  trustDomain: string;
  dataDir: string;
  database?: string;
  admin: string[];
  grant: string[];
  ssoIssuer?: string;
  ssoClientId?: string;
  ssoCliClientId?: string;
  ssoIdentityClaim: string;
  ssoGroupsClaim?: string;
  ssoGroup: string[];
  issuerCert?: string;
  issuerKey?: string;
  issuedCertLifetime?: string;
  leaseSeconds: number;
  runnerOfflineSeconds?: number;
  defaultJobTimeout: number;
  maxJobTimeout: number;
  jobTimeoutGrace: number;
  maxCertLifetime: string;
  codeDir?: string;
  artifactsDir?: string;
  maxArtifactSize: number;
  auditSpool?: string;
  auditSpoolMaxSize: number;
  tlsHandshakeTimeout: number;
  maxConcurrentStreams: number;
  bodyIdleTimeout: number;
  maxStreamsWithoutCertificate: number;
  maxConnectionsPerAddress: number;
  idleConnectionTimeout: number;
  check?: boolean;
  secretsKey?: string;
  secretsKeyPrevious?: string;
  webhookAllowPrivate?: boolean;
  webhookCa?: string;
  webhookTimeout: number;
  webhookRetryWindow: number;
  webhookDisableAfter: number;
  rateLimit: string[];
}

/** `forelead serve`: the control plane. */
export function serveCommand(): Command {
  return addRetentionOptions(
    new Command("serve")
      .option("--listen <host:port>", "address to listen on", "127.0.0.1:8443")
      .option(
        "--job-token-key <file>",
        "the key set that signs jobs' ID tokens (JSON, mode 0600; made when missing; " +
          "forelead job-token rotate adds a key); docs/workload-identity.md",
      )
      .option(
        "--job-token-listen <host:port>",
        "HTTPS address (the server certificate, HTTP/1.1 and HTTP/2, no client certificate) " +
          "serving only the job-token issuer's discovery document and JWKS",
      )
      .option(
        "--job-token-issuer-url <url>",
        "the issuer (iss) of jobs' ID tokens; default https:// and --job-token-listen",
      )
      .addOption(
        new Option(
          "--job-token-max-lifetime <seconds>",
          "longest life of a job's ID token, 1 to 900 (never past the lease's expiry)",
        ).argParser(integerIn("--job-token-max-lifetime", 1, 900)),
      )
      .option(
        "--job-token-subject <template>",
        "the sub path of a job's ID token under spiffe://<trust-domain>/, over {workspace}, " +
          "{job}, {pipeline}, {step}; default workspaces/{workspace}/jobs/{job}",
      )
      .option(
        "--metrics-listen <host:port|off>",
        "plain-HTTP address of /metrics (Prometheus), /healthz and /readyz, " +
          "without client certificates (docs/operations.md); off: not served",
        "127.0.0.1:9464",
      )
      .addOption(
        pathOption(
          "--tls-cert <file>",
          "server certificate (PEM); default: the development PKI in --certs-dir; " +
            "reloaded on SIGHUP and when it changes",
        ),
      )
      .addOption(pathOption("--tls-key <file>", "server key (PEM)"))
      .addOption(
        pathOption(
          "--client-ca <file>",
          "trust bundle for client certificates (PEM); default: the development CA",
        ),
      )
      .addOption(
        pathOption(
          "--certs-dir <dir>",
          "development PKI used (and created) when no TLS flags are given",
          "certs",
        ),
      )
      .option("--trust-domain <td>", "SPIFFE trust domain of client identities", "forelead")
      .addOption(
        pathOption(
          "--data-dir <dir>",
          "the directory serve keeps its state in: the embedded database (<dir>/db), " +
            "artifacts and the audit spool, also with a postgres:// database",
          "data",
        ),
      )
      .addOption(
        new Option(
          "--database <url|dir>",
          "postgres:// URL, or a directory for the embedded database (one process at " +
            "a time: it is locked); default: <data-dir>/db",
        ).argParser(databaseLocation),
      )
      .option(
        "--rate-limit <name=n/s|n/m>",
        "create this rate limit at start unless it is stored already (PUT " +
          "/v1/admin/rate-limits/{name} changes it); e.g. api=100/m; repeatable",
        collect,
        [],
      )
      .option(
        "--admin <spiffe-id>",
        "grant this identity the admin role: every admin method (repeatable)",
        collect,
        [],
      )
      .option(
        "--grant <spiffe-id=role>",
        "grant a role: ID=admin, ID=read (every workspace), ID=read:W1,W2 or " +
          "ID=enqueue:W1,W2 (those workspaces only; an identity always reads and " +
          "cancels the jobs it enqueued) or ID=delegate (acts only for people signed in " +
          "by single sign-on, with their roles); a person is spiffe://TD/users/SEGMENT; " +
          "repeatable",
        collect,
        [],
      )
      .option(
        "--sso-issuer <url>",
        "the single sign-on (OpenID Connect) provider whose ID tokens prove people, " +
          "exactly as its tokens' iss says it",
      )
      .option(
        "--sso-client-id <id>",
        "the dashboard's client at the provider: the audience of the ID tokens a " +
          "delegate hands over (SessionService.CreateSession)",
      )
      .option(
        "--sso-cli-client-id <id>",
        "the public client of forelead login: the audience of the ID tokens the CLI hands over",
      )
      .option(
        "--sso-identity-claim <claim>",
        "the ID token claim that names a person (docs/operations.md: how it becomes a SPIFFE ID)",
        "sub",
      )
      .option(
        "--sso-groups-claim <claim>",
        "the ID token claim listing the person's groups, for --sso-group",
      )
      .option(
        "--sso-group <group=role>",
        "give every person whose ID token lists GROUP a role: GROUP=admin, GROUP=read, " +
          "GROUP=read:W1,W2 or GROUP=enqueue:W1,W2 (needs --sso-groups-claim); repeatable",
        collect,
        [],
      )
      .addOption(
        pathOption(
          "--issuer-cert <file>",
          "CA certificate (PEM, optionally followed by its chain) that signs " +
            "runner certificates on enroll and renew; default: the development CA " +
            "when no TLS flags are given",
        ),
      )
      .addOption(
        pathOption(
          "--issuer-key <file>",
          "the issuer's private key: ECDSA P-256 or RSA, PEM as PKCS#8, SEC1 " +
            "(BEGIN EC PRIVATE KEY) or PKCS#1 (BEGIN RSA PRIVATE KEY), unencrypted",
        ),
      )
      .option(
        "--issued-cert-lifetime <duration>",
        "lifetime of the certificates the issuer signs (default: --max-cert-lifetime)",
      )
      .addOption(
        new Option("--lease-seconds <n>", "lease length in seconds")
          .default(30)
          .argParser(integerIn("--lease-seconds", 5, 3600)),
      )
      .addOption(
        new Option(
          "--runner-offline-seconds <n>",
          "a runner not heard from for this long is offline (at least --lease-seconds; default " +
            `${defaultRunnerOfflineSeconds}, or --lease-seconds when longer)`,
        ).argParser(integerIn("--runner-offline-seconds", 5, 86400)),
      )
      .addOption(
        new Option("--default-job-timeout <duration>", "timeout of a job enqueued without one")
          .default(defaultJobTimeouts.defaultSeconds, "6h")
          .argParser(secondsFlag("--default-job-timeout", { wholeSeconds: true })),
      )
      .addOption(
        new Option(
          "--max-job-timeout <duration>",
          "longest timeout a job may ask for; an enqueue over it is refused",
        )
          .default(defaultJobTimeouts.maxSeconds, "7d")
          .argParser(secondsFlag("--max-job-timeout", { wholeSeconds: true })),
      )
      .addOption(
        new Option(
          "--job-timeout-grace <duration>",
          "how long a job may run past its timeout before the control plane fails it (error timeout)",
        )
          .default(defaultJobTimeouts.graceSeconds, "30s")
          .argParser(secondsFlag("--job-timeout-grace", { wholeSeconds: true })),
      )
      .option(
        "--max-cert-lifetime <duration>",
        "longest client certificate lifetime accepted",
        formatDuration(defaultMaxLifetimeMs),
      )
      .addOption(
        pathOption(
          "--code-dir <dir>",
          "where repository mirrors and scratch files live (default: a private temporary directory)",
        ),
      )
      .addOption(
        pathOption(
          "--artifacts-dir <dir>",
          "store artifacts as files in this directory (replicas must share it); " +
            "default: <data-dir>/artifacts with an embedded database, in the database " +
            "itself with a postgres:// URL",
        ),
      )
      .addOption(
        pathOption(
          "--audit-spool <dir>",
          "where audit records wait (fsynced) while the database cannot take them; " +
            "one process's (locked): a second serve given the same one is refused; " +
            "default: <data-dir>/audit-spool; with a " +
            "postgres:// URL, <data-dir>/audit-spool/<listen host>-<port> (the next free " +
            "<…>.2, .3 when a live replica holds it), where the spools of replicas " +
            "no longer running are drained too",
        ),
      )
      .addOption(
        new Option(
          "--audit-spool-max-size <size>",
          "the spool's bound; past it requests are refused (503) until the database takes records",
        )
          .default(2 ** 30, "1GiB")
          .argParser(byteSize("--audit-spool-max-size")),
      )
      .option(
        "--webhook-allow-private",
        "let webhooks reach loopback, private (RFC 1918, fc00::/7) and link-local " +
          "addresses (the metadata address among them), also by plain http; " +
          "refused by default (docs/webhooks.md)",
      )
      .addOption(
        pathOption(
          "--webhook-ca <file>",
          "PEM certificates trusted for webhook receivers, besides the system's",
        ),
      )
      .addOption(
        new Option("--webhook-timeout <duration>", "one webhook attempt's bound")
          .default(10, "10s")
          .argParser(secondsFlag("--webhook-timeout", { wholeSeconds: true })),
      )
      .addOption(
        new Option(
          "--webhook-retry-window <duration>",
          "how long a webhook delivery is retried (exponential backoff with jitter, " +
            "on a timeout, a connection error or a 5xx) before it is marked failed",
        )
          .default(3600, "1h")
          .argParser(secondsFlag("--webhook-retry-window", { wholeSeconds: true })),
      )
      .addOption(
        new Option(
          "--webhook-disable-after <n>",
          "failed deliveries in a row that disable a webhook subscription",
        )
          .default(5)
          .argParser(integerIn("--webhook-disable-after", 1, 1000)),
      )
      .addOption(
        new Option(
          "--max-artifact-size <size>",
          "largest artifact an upload may declare, e.g. 2GiB, 500MiB or bytes",
        )
          .default(defaultMaxArtifactBytes, "2GiB")
          .argParser(byteSize("--max-artifact-size")),
      )
      .addOption(
        pathOption(
          "--secrets-key <file>",
          "the key (32 random bytes, base64, mode 0600) that encrypts job secrets " +
            "and repository credentials; required with a postgres:// URL (the same " +
            "file on every replica); with an embedded database made on the first " +
            "start, by default outside the data directory: $XDG_CONFIG_HOME/forelead/" +
            "secrets.key, else /etc/forelead/secrets.key as root, ~/.config/forelead/" +
            "secrets.key otherwise",
        ),
      )
      .addOption(
        pathOption(
          "--secrets-key-previous <file>",
          "the key being replaced: every secret is re-encrypted from it to " +
            "--secrets-key at start, after which it is no longer needed",
        ),
      )
      // Connection limits (docs/limits.md).
      .addOption(
        new Option(
          "--tls-handshake-timeout <seconds>",
          "close a TLS handshake not finished within this",
        )
          .default(defaultConnectionLimits.handshakeTimeoutMs / 1000)
          .argParser(integerIn("--tls-handshake-timeout", 1, 600)),
      )
      .addOption(
        new Option(
          "--max-concurrent-streams <n>",
          "SETTINGS_MAX_CONCURRENT_STREAMS of every connection",
        )
          .default(defaultConnectionLimits.maxConcurrentStreams)
          .argParser(integerIn("--max-concurrent-streams", 1, 10_000)),
      )
      .addOption(
        new Option(
          "--body-idle-timeout <seconds>",
          "end a request body that brings less than 1 KiB and no complete NDJSON line in " +
            "this long (408 on REST)",
        )
          .default(defaultConnectionLimits.bodyIdleMs / 1000)
          .argParser(integerIn("--body-idle-timeout", 1, 3600)),
      )
      .addOption(
        new Option(
          "--max-streams-without-certificate <n>",
          "open streams a connection without a client certificate may have (it can only enroll)",
        )
          .default(defaultConnectionLimits.certlessMaxStreams)
          .argParser(integerIn("--max-streams-without-certificate", 1, 1000)),
      )
      .addOption(
        new Option(
          "--max-connections-per-address <n>",
          "connections one client address may hold, handshakes included",
        )
          .default(defaultConnectionLimits.maxConnectionsPerAddress)
          .argParser(integerIn("--max-connections-per-address", 1, 1_000_000)),
      )
      .addOption(
        new Option(
          "--idle-connection-timeout <seconds>",
          "close a connection with no open stream for this long",
        )
          .default(defaultConnectionLimits.idleConnectionMs / 1000)
          .argParser(integerIn("--idle-connection-timeout", 1, 86_400)),
      )
      .option(
        "--check",
        "check every flag, file and the database, print the doctor's table, and " +
          "exit (1 when a check fails) without listening",
      )
      .option(
        "--config <file>",
        "read options from this file's [serve] table (TOML, or JSON for *.json; " +
          "keys are the flag names: listen, database, secrets-key, grant = [...]); " +
          "flags win; relative paths are relative to the file (docs/cli.md)",
      )
      .hook("preAction", async (command) => {
        const file = command.getOptionValue("config") as string | undefined;
        if (file) await applyServeConfig(command, file);
      })
      .action(async (flags: ServeFlags) => {
        if (flags.check) return checkServeFlags(flags);
        await checkPortsFree(listenAddresses(flags));
        warnOfOldPlaces(flags);
        if (!isPostgresUrl(serveDatabase(flags))) compileEmbeddedBaselineOnly();
        const options = await serveOptions(flags);
        const plane = await startControlPlane(options);
        const roles = [
          ...flags.admin.map((id) => `${id}=admin`),
          ...(options.grants ?? []).map(
            (g) => `${describeIdentity(g.spiffeId)}=${describeGrant(g)}`,
          ),
          ...(options.groupGrants ?? []).map((g) => `group ${g.group}=${describeGrant(g)}`),
        ];
        // Before the "serving" line, which scripts wait for.
        if (plane.jobTokens)
          console.log(
            `forelead: job ID tokens issued as ${plane.jobTokens.issuerUrl}` +
              `${plane.jobTokens.discoveryUrl ? `; discovery and JWKS on ${plane.jobTokens.discoveryUrl}` : ""}`,
          );
        if (plane.metrics)
          console.log(
            `forelead: metrics and health on ${plane.metrics.url} (/metrics, ` +
              `/healthz, /readyz; plain HTTP, no client ` +
              `certificate)` +
              `${plane.metrics.loopback ? "" : `; ${plane.metrics.url} is not a loopback address: anyone who can reach this host on the network can read them`}`,
          );
        console.log(
          plane.issuer
            ? `forelead: issuing runner certificates with ${plane.issuer}`
            : "forelead: no issuing CA: enrollment and certificate renewal are refused " +
                "(give --issuer-cert and --issuer-key to enable them)",
        );
        console.log(
          `forelead: TLS certificate ${plane.tls.describe()}; reloaded on SIGHUP and when its files change`,
        );
        console.log(
          `forelead: serving ${plane.url} (trust domain "${flags.trustDomain}", ` +
            `${plane.store.description}, artifacts in ` +
            `${plane.artifacts.store.description}, audit spool ` +
            `${plane.audit.backlog().spoolPath}, lease ` +
            `${flags.leaseSeconds}s${roles.length ? `, roles ${roles.join(" ")}` : ""})`,
        );
        const stop = (signal: string) => {
          console.log(`forelead: ${signal} received; closing connections and the database`);
          plane.close().then(
            () => process.exit(0),
            (err) => {
              console.error(`forelead: error while shutting down: ${err.message}`);
              process.exit(1);
            },
          );
        };
        process.once("SIGTERM", () => stop("SIGTERM"));
        process.once("SIGINT", () => stop("SIGINT"));
      }),
  );
}

/**
 * A serve on the embedded database runs PGlite's Postgres on V8's baseline WebAssembly code
 * (Liftoff) and never tiers it up to TurboFan: the optimized code and the compiler's memory were
 * ~60 MiB of an idle serve's RSS, and PGlite's queries ran as fast without them on this machine
 * (docs/performance.md, "Start-up and idle memory"). Set before anything compiles WebAssembly, in
 * this process only: the tests' workers, which open PGlite themselves, keep V8's default.
 */
function compileEmbeddedBaselineOnly(): void {
  setFlagsFromString("--liftoff-only");
}

/** The --sso-* flags, checked; undefined without --sso-issuer. */
function ssoOptions(flags: ServeFlags): SsoOptions | undefined {
  if (!flags.ssoIssuer) {
    if (flags.ssoClientId || flags.ssoCliClientId || flags.ssoGroupsClaim)
      throw new Error(
        "--sso-client-id, --sso-cli-client-id and --sso-groups-claim need --sso-issuer",
      );
    return undefined;
  }
  providerUrl(flags.ssoIssuer);
  if (!flags.ssoClientId && !flags.ssoCliClientId)
    throw new Error("--sso-issuer needs --sso-client-id (dashboard) or --sso-cli-client-id (CLI)");
  return {
    issuer: flags.ssoIssuer,
    clientId: flags.ssoClientId || undefined,
    cliClientId: flags.ssoCliClientId || undefined,
    identityClaim: flags.ssoIdentityClaim,
    groupsClaim: flags.ssoGroupsClaim || undefined,
  };
}

/**
 * The control plane's options from the flags, each flag and file checked; an error names the flag.
 */
async function serveOptions(flags: ServeFlags): Promise<ControlPlaneOptions> {
  const { host, port } = parseListen(flags.listen, "--listen");
  const metricsListen =
    flags.metricsListen === "off"
      ? undefined
      : parseListen(flags.metricsListen, "--metrics-listen");
  const secretsKeys = await loadSecretsKeys(flags);
  parseSpiffeId(`spiffe://${flags.trustDomain}`);
  flags.admin.forEach((id) => checkServiceIdentity(id, flags.trustDomain));
  const grants = flags.grant.map((g) => parseRoleGrant(g, flags.trustDomain));
  const groupGrants = flags.ssoGroup.map(parseGroupGrant);
  const sso = ssoOptions(flags);
  if (groupGrants.length > 0 && !sso?.groupsClaim)
    throw new Error("--sso-group needs --sso-issuer and --sso-groups-claim");
  const maxCertLifetimeMs = parseDuration(flags.maxCertLifetime);
  const issuedCertLifetimeMs = flags.issuedCertLifetime
    ? parseDuration(flags.issuedCertLifetime)
    : undefined;
  const tls = await loadTls(flags);
  const issuer = await loadIssuer(flags);
  const database = serveDatabase(flags);
  const artifactsDir = flags.artifactsDir ?? defaultArtifactsDir(flags.dataDir, database);
  const auditSpoolDir =
    flags.auditSpool ?? defaultAuditSpoolDir(flags.dataDir, database, host, port);
  // Only the default folder of replicas' spools is searched for orphans: a spool given by flag is
  // the operator's to place.
  const auditSpoolAdoptFrom =
    !flags.auditSpool && isPostgresUrl(database) ? sharedSpoolRoot(flags.dataDir) : undefined;
  return {
    host,
    port,
    ...tls,
    trustDomain: flags.trustDomain,
    database,
    admins: flags.admin,
    grants,
    groupGrants,
    sso,
    issuer,
    issuedCertLifetimeMs: issuedCertLifetimeMs || undefined,
    leaseSeconds: flags.leaseSeconds,
    runnerOfflineSeconds: flags.runnerOfflineSeconds,
    jobTimeouts: {
      defaultSeconds: flags.defaultJobTimeout,
      maxSeconds: flags.maxJobTimeout,
      graceSeconds: flags.jobTimeoutGrace,
    },
    maxCertLifetimeMs,
    codeDir: flags.codeDir || undefined,
    artifactsDir: artifactsDir || undefined,
    maxArtifactBytes: flags.maxArtifactSize,
    secretsKeys,
    retentions: retentionsFromFlags(flags),
    rateLimits: flags.rateLimit.map(parseRateLimitFlag),
    webhooks: {
      allowPrivate: flags.webhookAllowPrivate ?? false,
      ca: flags.webhookCa ? [await readNamedFile(flags.webhookCa, "--webhook-ca")] : undefined,
      timeoutMs: flags.webhookTimeout * 1000,
      retryWindowMs: flags.webhookRetryWindow * 1000,
      disableAfter: flags.webhookDisableAfter,
    },
    auditSpoolDir: auditSpoolDir ? resolve(auditSpoolDir) : undefined,
    auditSpoolAdoptFrom,
    auditSpoolMaxBytes: flags.auditSpoolMaxSize,
    metricsListen: metricsListen || undefined,
    jobTokens: jobTokenOptions(flags),
    connectionLimits: {
      handshakeTimeoutMs: flags.tlsHandshakeTimeout * 1000,
      maxConcurrentStreams: flags.maxConcurrentStreams,
      bodyIdleMs: flags.bodyIdleTimeout * 1000,
      certlessMaxStreams: flags.maxStreamsWithoutCertificate,
      maxConnectionsPerAddress: flags.maxConnectionsPerAddress,
      idleConnectionMs: flags.idleConnectionTimeout * 1000,
    },
  };
}

/**
 * `serve --check`: what a start would refuse or warn about, as the doctor's table; exit code 1 when
 * a check fails.
 */
async function checkServeFlags(flags: ServeFlags): Promise<void> {
  let checks: DoctorCheck[];
  try {
    checks = await checkServe(await serveOptions(flags));
  } catch (err) {
    checks = [
      {
        name: "options",
        status: "fail",
        detail: (err as Error).message,
        hint: "fix the flag or file it names",
      },
    ];
  }
  reportChecks(checks, false, (t) => process.stdout.write(t));
}

/** A commander parser for sizes: bytes, or a number with KiB, MiB, GiB or TiB. */
function byteSize(name: string): (value: string) => number {
  const units: Record<string, number> = {
    "": 1,
    B: 1,
    KiB: 2 ** 10,
    MiB: 2 ** 20,
    GiB: 2 ** 30,
    TiB: 2 ** 40,
  };
  return (value) => {
    const m = /^(\d+)\s*(B|KiB|MiB|GiB|TiB)?$/.exec(value.trim());
    const bytes = m ? Number(m[1]) * units[m[2] ?? ""]! : NaN;
    if (!Number.isSafeInteger(bytes) || bytes < 1)
      throw new InvalidArgumentError(
        `${name} must be a size such as 2GiB, 500MiB or 1048576; got ${JSON.stringify(value)}`,
      );
    return bytes;
  };
}

/** The --job-token-* flags; undefined without --job-token-key. */
function jobTokenOptions(flags: ServeFlags): ControlPlaneOptions["jobTokens"] {
  const given = [
    flags.jobTokenListen && "--job-token-listen",
    flags.jobTokenIssuerUrl && "--job-token-issuer-url",
    flags.jobTokenMaxLifetime !== undefined && "--job-token-max-lifetime",
    flags.jobTokenSubject && "--job-token-subject",
  ].filter(Boolean);
  if (!flags.jobTokenKey) {
    if (given.length) throw new Error(`${given.join(", ")} need --job-token-key <file>`);
    return undefined;
  }
  return {
    keyFile: resolve(flags.jobTokenKey),
    listen: flags.jobTokenListen
      ? parseListen(flags.jobTokenListen, "--job-token-listen")
      : undefined,
    issuerUrl: flags.jobTokenIssuerUrl,
    maxLifetimeSeconds: flags.jobTokenMaxLifetime,
    subjectTemplate: flags.jobTokenSubject,
  };
}

/** --database: a URL or "memory://" as given, a directory made absolute. */
function databaseLocation(value: string): string {
  return isPostgresUrl(value) || value === "memory://" ? value : resolve(value);
}

/** The addresses serve will listen on, for checkPortsFree. */
function listenAddresses(flags: ServeFlags): { host: string; port: number; flag: string }[] {
  return [
    { ...parseListen(flags.listen, "--listen"), flag: "--listen" },
    ...(flags.metricsListen === "off"
      ? []
      : [{ ...parseListen(flags.metricsListen, "--metrics-listen"), flag: "--metrics-listen" }]),
    ...(flags.jobTokenListen
      ? [{ ...parseListen(flags.jobTokenListen, "--job-token-listen"), flag: "--job-token-listen" }]
      : []),
  ];
}

function parseListen(listen: string, flag: string): { host: string; port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:]+)):(\d+)$/.exec(listen);
  const port = Number(m?.[3]);
  if (!m || port > 65535)
    throw new Error(
      `${flag} ${JSON.stringify(listen)} is not host:port (e.g. 127.0.0.1:8443 ` +
        `or [::1]:8443)${flag === "--metrics-listen" ? ", or off" : ""}`,
    );
  return { host: (m[1] ?? m[2])!, port };
}

/** The TLS files (watched and reloaded by the control plane) and their PEMs as read now. */
async function loadTls(flags: ServeFlags): Promise<TlsPems & { tlsFiles: TlsFiles }> {
  const given = [flags.tlsCert, flags.tlsKey, flags.clientCa].filter(Boolean).length;
  if (given === 0) {
    const { paths, created } = await initDevPki(flags.certsDir, { hosts: defaultHosts });
    if (created)
      console.log(`forelead: created a development PKI in ${paths.dir} (not for production)`);
    const tlsFiles = { cert: paths.serverCert, key: paths.serverKey, clientCa: paths.caCert };
    return {
      tlsFiles,
      ...(await readTlsFiles(tlsFiles, {
        cert: "server certificate",
        key: "server key",
        clientCa: "CA",
      })),
    };
  }
  if (given !== 3)
    throw new Error(
      "--tls-cert, --tls-key and --client-ca go together: give all three, or none to use the development PKI",
    );
  const tlsFiles = { cert: flags.tlsCert!, key: flags.tlsKey!, clientCa: flags.clientCa! };
  return {
    tlsFiles,
    ...(await readTlsFiles(tlsFiles, {
      cert: "--tls-cert",
      key: "--tls-key",
      clientCa: "--client-ca",
    })),
  };
}

/**
 * The issuing CA: both issuer flags, or, with no TLS flags at all, the
 * development CA that already signs the server and client certificates.
 * Otherwise none: certificates then come from an external CA.
 */
async function loadIssuer(
  flags: ServeFlags,
): Promise<{ certPem: string; keyPem: string } | undefined> {
  if (Boolean(flags.issuerCert) !== Boolean(flags.issuerKey))
    throw new Error("--issuer-cert and --issuer-key go together: give both, or neither");
  if (flags.issuerCert)
    return {
      certPem: await readNamedFile(flags.issuerCert, "--issuer-cert"),
      keyPem: await readNamedFile(flags.issuerKey!, "--issuer-key"),
    };
  if (flags.tlsCert || flags.tlsKey || flags.clientCa) return undefined;
  const paths = devPkiPaths(flags.certsDir);
  return {
    certPem: await readNamedFile(paths.caCert, "CA"),
    keyPem: await readNamedFile(paths.caKey, "CA key"),
  };
}
