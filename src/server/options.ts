import type { Retentions } from "../ops/retention-kinds.js";
import type { BatcherOptions } from "../broker/leases/batcher.js";
import type { JobTimeouts } from "../broker/jobs/rules.js";
import { defaultConnectionLimits, type ConnectionLimits } from "./connection-limits.js";
import { createIssuer, type Issuer, type IssuerMaterial } from "../identity/issuer.js";
import {
  createRoleTable,
  type GroupGrant,
  type RoleGrant,
  type RoleTable,
} from "../identity/roles.js";
import type { SsoOptions } from "../identity/sso.js";
import type { SecretsKeys } from "../secrets/keys.js";
import { createTlsMaterial, type TlsFiles, type TlsMaterial } from "./tls-material.js";
import type { MetricsListen } from "./metrics/http.js";
import type { JobTokenOptions } from "./job-tokens.js";
import { defaultRunnerOfflineSeconds } from "../broker/fleet/state.js";
import type { WebhookOptions } from "../webhooks/webhooks.js";
import type { RateLimitInput } from "../broker/jobs/rate-limits.js";

/** Everything `forelead serve` needs, already read from flags and files. */
export interface ControlPlaneOptions {
  readonly host: string;
  /** 0 picks a free port. */
  readonly port: number;
  readonly tlsCertPem: string;
  readonly tlsKeyPem: string;
  /** The client trust bundle (PEM). */
  readonly clientCaPem: string;
  /**
   * The files the three PEMs were read from: re-read on SIGHUP and when they change
   * (src/server/tls-material.ts).
   */
  readonly tlsFiles?: TlsFiles;
  readonly trustDomain: string;
  /** postgres:// URL, a directory for the embedded database, or "memory://". */
  readonly database: string;
  /** SPIFFE IDs granted the admin role (`--admin`). */
  readonly admins: readonly string[];
  /** Further roles for service identities (`--grant ID=read`, `--grant ID=enqueue:w1,w2`). */
  readonly grants?: readonly RoleGrant[];
  /** Roles given to people by the provider groups their ID token lists (`--sso-group`). */
  readonly groupGrants?: readonly GroupGrant[];
  /** The single sign-on provider whose ID tokens prove people (`--sso-*`); none when unset. */
  readonly sso?: SsoOptions;
  /** The CA that signs runner certificates on enroll and renew; without one, both are refused. */
  readonly issuer?: IssuerMaterial;
  /** Lifetime of the certificates the issuer signs; the maximum certificate lifetime by default. */
  readonly issuedCertLifetimeMs?: number;
  readonly leaseSeconds: number;
  /**
   * A runner silent this long is offline (forelead_runner_state); at least leaseSeconds; by
   * default defaultRunnerOfflineSeconds (90), or leaseSeconds when that is longer.
   */
  readonly runnerOfflineSeconds?: number;
  readonly maxCertLifetimeMs: number;
  /** Byte bound of one request body; 1 MiB by default. */
  readonly maxBodyBytes?: number;
  /** How often expired leases and overdue jobs are swept; 1 s by default. */
  readonly sweepIntervalMs?: number;
  /**
   * Job timeouts: the default, the maximum and the grace; defaultJobTimeouts (6 h, 7 d, 30 s)
   * unless given.
   */
  readonly jobTimeouts?: JobTimeouts;
  /**
   * Where repository mirrors and scratch files live; a private temporary directory when omitted.
   */
  readonly codeDir?: string;
  /** Cap of one git bundle, sent or received; 256 MiB by default. */
  readonly maxBundleBytes?: number;
  /**
   * A directory for artifacts as files (blobs/ and staging/); replicas must
   * share it. Without it: Postgres rows on a postgres:// database, else a
   * fresh temporary directory, removed at close (tests).
   */
  readonly artifactsDir?: string;
  /**
   * Where audit records the database cannot take are spooled (fsynced) until
   * it takes them again. Default: a fresh temporary directory, removed at
   * close (tests); `forelead serve` puts it beside the data directory.
   */
  readonly auditSpoolDir?: string;
  /**
   * A folder of replicas' spools (`forelead serve`'s default for a postgres://
   * database): spools in it that no live process holds are drained at start
   * and every minute after.
   */
  readonly auditSpoolAdoptFrom?: string;
  /**
   * The spool's bound; past it requests are refused (503) until the database takes records. 1 GiB
   * by default.
   */
  readonly auditSpoolMaxBytes?: number;
  /** Largest artifact an upload may declare; 2 GiB by default. */
  readonly maxArtifactBytes?: number;
  /**
   * An events or logs request still open after this many seconds is ended by the server; 30 by
   * default.
   */
  readonly streamMaxSeconds?: number;
  /**
   * How long each kind of record is kept, in milliseconds (--job-retention, --event-retention,
   * ...; docs/retention.md); each omitted takes its default.
   */
  readonly retentions?: Partial<Retentions>;
  /**
   * Rate limits to create at start when not stored yet (--rate-limit); a stored one is left as it
   * is, so the database stays the one source of truth.
   */
  readonly rateLimits?: readonly RateLimitInput[];
  /** About how often records past their retention are pruned; 10 minutes by default. */
  readonly pruneIntervalMs?: number;
  /** How webhooks are delivered (--webhook-*; docs/webhooks.md). */
  readonly webhooks?: WebhookOptions;
  /**
   * How the broker batches claims and completions; its default unless given (benchmarks compare).
   */
  readonly batching?: BatcherOptions;
  /**
   * false: no direct handoff from an enqueue to a waiting claim (src/broker/leases/handoff.ts); on
   * unless false (benchmarks compare).
   */
  readonly handoff?: boolean;
  /** Bounds on client connections (docs/limits.md); each one omitted takes its default. */
  readonly connectionLimits?: Partial<ConnectionLimits>;
  /**
   * Where /metrics, /healthz and /readyz are served over plain HTTP (`--metrics-listen`); not
   * served when omitted.
   */
  readonly metricsListen?: MetricsListen;
  /**
   * Signed ID tokens for jobs under their lease, and the issuer's discovery listener
   * (--job-token-*; docs/workload-identity.md); none issued when omitted.
   */
  readonly jobTokens?: JobTokenOptions;
  /**
   * The key that seals job secrets and repository credentials (--secrets-key),
   * and the one being rotated away from (--secrets-key-previous). Required on
   * a postgres:// database or a data directory; a database in memory gets a
   * key for the run.
   */
  readonly secretsKeys?: SecretsKeys;
}

/**
 * The options with what checking them made: the TLS material (with the client trust anchors),
 * roles, the loaded issuer.
 */
export interface CheckedOptions {
  readonly options: ControlPlaneOptions;
  readonly tls: TlsMaterial;
  readonly roles: RoleTable;
  readonly issuer: Issuer | undefined;
  readonly maxBodyBytes: number;
  readonly connectionLimits: ConnectionLimits;
  /** options.runnerOfflineSeconds, or its default. */
  readonly runnerOfflineSeconds: number;
}

const defaultMaxBodyBytes = 1024 * 1024;

/**
 * Checks everything that can be checked before the database is touched (TLS
 * material, the client trust bundle, roles, the issuer and its lifetime), so
 * a bad flag fails at once with a message that names it.
 */
export async function checkOptions(options: ControlPlaneOptions): Promise<CheckedOptions> {
  const tls = createTlsMaterial(options, options.tlsFiles);
  const trustAnchors = tls.trustAnchors;
  const roles = createRoleTable(options.grants ?? [], options.admins, options.groupGrants);
  const issuedLifetimeMs = options.issuedCertLifetimeMs ?? options.maxCertLifetimeMs;
  if (issuedLifetimeMs > options.maxCertLifetimeMs) {
    throw new Error(
      `the issued certificate lifetime (${issuedLifetimeMs} ms) is over the ` +
        `maximum this control plane accepts (${options.maxCertLifetimeMs} ms)`,
    );
  }
  const timeouts = options.jobTimeouts;
  if (timeouts && timeouts.defaultSeconds > timeouts.maxSeconds) {
    throw new Error(
      `the default job timeout (${timeouts.defaultSeconds} s) is over the ` +
        `maximum job timeout (${timeouts.maxSeconds} s)`,
    );
  }
  const issuer: Issuer | undefined = options.issuer
    ? await createIssuer(options.issuer, trustAnchors, issuedLifetimeMs)
    : undefined;
  const connectionLimits = { ...defaultConnectionLimits, ...options.connectionLimits };
  for (const [name, value] of Object.entries(connectionLimits)) {
    if (!Number.isSafeInteger(value) || value < 1)
      throw new Error(`the connection limit ${name} must be a positive integer; got ${value}`);
  }
  const runnerOfflineSeconds =
    options.runnerOfflineSeconds ?? Math.max(defaultRunnerOfflineSeconds, options.leaseSeconds);
  if (!Number.isInteger(runnerOfflineSeconds) || runnerOfflineSeconds < options.leaseSeconds)
    throw new Error(
      `the runner offline threshold (${runnerOfflineSeconds} s) must be a whole number of ` +
        `seconds, at least the lease length (${options.leaseSeconds} s): a busy runner is heard ` +
        `from by its renewals, every third of a lease`,
    );
  return {
    options,
    tls,
    roles,
    issuer,
    maxBodyBytes: options.maxBodyBytes ?? defaultMaxBodyBytes,
    connectionLimits,
    runnerOfflineSeconds,
  };
}
