import type { Kysely } from "kysely";
import {
  defaultSubjectTemplate,
  issueJobToken,
  jobTokenLimits,
  type IssuedJobToken,
  type JobTokenRequest,
} from "../identity/job-tokens/issue.js";
import { createJobTokenKeyFile, watchJobTokenKeys } from "../identity/job-tokens/key-set.js";
import type { Database } from "../store/schema.js";
import type { DbClock } from "../store/db-clock.js";
import type { ConnectionCounters, ConnectionLimits } from "./connection-limits.js";
import { serveJobTokenDiscovery, type JobTokenListen } from "./job-token-listener.js";
import type { ResourceStack } from "./resource-stack.js";
import type { TlsMaterial } from "./tls-material.js";

/** How jobs' ID tokens are issued (`serve --job-token-*`). */
export interface JobTokenOptions {
  /** The key set file (--job-token-key); made (0600) when it does not exist. */
  readonly keyFile: string;
  /** The discovery listener (--job-token-listen); none when omitted (host the documents). */
  readonly listen?: JobTokenListen;
  /** The `iss` claim (--job-token-issuer-url); default https:// and the listener's address. */
  readonly issuerUrl?: string;
  /** At most 900 (the default). */
  readonly maxLifetimeSeconds?: number;
  /** The `sub` path template (--job-token-subject); default workspaces/{workspace}/jobs/{job}. */
  readonly subjectTemplate?: string;
}

/** The job-token issuer of a running control plane. */
export interface JobTokens {
  /** The `iss` of every token. */
  readonly issuerUrl: string;
  /** The discovery listener's URL, when there is one. */
  readonly discoveryUrl: string | undefined;
  /** What the connection limits cut on the discovery listener, when there is one. */
  readonly discoveryConnections: ConnectionCounters | undefined;
  issue(req: JobTokenRequest): Promise<IssuedJobToken>;
}

/**
 * Reads (or makes) the key set, starts the discovery listener when asked, and returns the issuer.
 * Throws at start on bad settings, naming the flag.
 */
export async function openJobTokens(
  options: JobTokenOptions,
  deps: {
    readonly db: Kysely<Database>;
    readonly trustDomain: string;
    readonly tls: TlsMaterial;
    /** The main listener's connection limits; the discovery listener keeps them too. */
    readonly limits: ConnectionLimits;
    readonly clock: DbClock;
  },
  stack: ResourceStack,
): Promise<JobTokens> {
  const maxLifetimeSeconds = options.maxLifetimeSeconds ?? jobTokenLimits.maxLifetimeSeconds;
  if (!(
    Number.isInteger(maxLifetimeSeconds) &&
    maxLifetimeSeconds >= 1 &&
    maxLifetimeSeconds <= jobTokenLimits.maxLifetimeSeconds
  ))
    throw new Error(
      `--job-token-max-lifetime must be 1 to ${jobTokenLimits.maxLifetimeSeconds} seconds; ` +
        `got ${maxLifetimeSeconds}`,
    );
  const subjectTemplate = options.subjectTemplate ?? defaultSubjectTemplate;
  if (!/^[A-Za-z0-9._~{}/-]+$/.test(subjectTemplate) || subjectTemplate.startsWith("/"))
    throw new Error(
      `--job-token-subject ${JSON.stringify(subjectTemplate)} is not a SPIFFE ID path template: ` +
        `segments of A-Z a-z 0-9 . _ - ~ and {workspace}, {job}, {pipeline}, {step}`,
    );
  if (options.issuerUrl !== undefined) checkIssuerUrl(options.issuerUrl);
  if (await createJobTokenKeyFile(options.keyFile))
    console.log(`forelead: made the job-token key set ${options.keyFile} (mode 0600)`);
  const keys = await watchJobTokenKeys(options.keyFile);
  const nowMs = () => Number(deps.clock.nowNs() / 1_000_000n);
  let issuerUrl = options.issuerUrl;
  const server = options.listen
    ? await serveJobTokenDiscovery(
        options.listen,
        deps.tls,
        deps.limits,
        { issuerUrl: () => issuerUrl!, keys },
        nowMs,
        stack,
      )
    : undefined;
  issuerUrl ??= server?.url;
  if (!issuerUrl)
    throw new Error(
      "--job-token-key needs --job-token-issuer-url (where the documents are hosted) or " +
        "--job-token-listen (this control plane serves them)",
    );
  const settings = {
    issuerUrl,
    trustDomain: deps.trustDomain,
    maxLifetimeSeconds,
    subjectTemplate,
    keys,
  };
  return {
    issuerUrl,
    discoveryUrl: server?.url,
    discoveryConnections: server?.counters,
    issue: (req) => issueJobToken(deps.db, settings, req),
  };
}

/** An issuer URL: https, no query or fragment (OpenID Connect Discovery 1.0). */
function checkIssuerUrl(url: string): void {
  let parsed: URL | undefined;
  try {
    parsed = new URL(url);
  } catch {
    parsed = undefined;
  }
  if (!parsed || parsed.protocol !== "https:" || parsed.search || parsed.hash)
    throw new Error(
      `--job-token-issuer-url ${JSON.stringify(url)} is not an issuer URL: https://host[:port][/path], ` +
        `no query or fragment`,
    );
}
