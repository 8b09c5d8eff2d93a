import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createArtifacts } from "../artifacts/artifacts.js";
import { createFileArtifactStore } from "../artifacts/fs-store.js";
import { createPostgresArtifactStore } from "../artifacts/pg-store.js";
import type { ArtifactStore } from "../artifacts/store.js";
import { createBroker } from "../broker/broker.js";
import { ensureRateLimits } from "../broker/jobs/rate-limits.js";
import { createPauses } from "../broker/fleet/pauses.js";
import { createEvents } from "../events/events.js";
import { createCodeHost } from "../code/code-host.js";
import { spoolDatabaseTag } from "../identity/audit-spool-adoption.js";
import { createIdentity } from "../identity/identity.js";
import { createInventory } from "../inventory/inventory.js";
import { defaultSecretsKeys } from "../secrets/keys.js";
import { openSecrets } from "../secrets/startup.js";
import { isPostgresUrl, openStore, type Store } from "../store/database.js";
import { createDbClock } from "../store/db-clock.js";
import { createStreams } from "../streams/streams.js";
import { startReplicaHeartbeat } from "../ops/replicas.js";
import { createRetention } from "../ops/retention.js";
import { buildInfo } from "./build-info.js";
import type { CheckedOptions } from "./options.js";
import type { ResourceStack } from "./resource-stack.js";
import { createMetrics } from "./metrics/metrics.js";
import { createWebhooks } from "../webhooks/webhooks.js";
import { openJobTokens } from "./job-tokens.js";

/** The domain objects the services bind to, each open on the database. */
export type Domain = Awaited<ReturnType<typeof buildDomain>>;

/**
 * Opens the database (migrated) and builds every domain object on it, each
 * registered on `stack` as it opens, so whatever was opened is closed, newest
 * first, when a later step fails or the control plane closes. A new domain
 * object is one line here (and its name in the object returned).
 */
export async function buildDomain(checked: CheckedOptions, stack: ResourceStack) {
  const { options } = checked;
  const keys =
    options.secretsKeys ??
    defaultSecretsKeys({
      shared: isPostgresUrl(options.database),
      persistent: options.database !== "memory://",
    });
  const store = stack.use("the database", await openStore(options.database));
  const secrets = await openSecrets(store.db, keys.current, keys.previous);
  if (keys.previous)
    console.log(
      `forelead: re-encrypted ${secrets.rotated} secret(s) from ` +
        `${keys.previous.source} to ${keys.current.source}; the previous key is ` +
        `no longer needed`,
    );
  if (secrets.sealedCredentials)
    console.log(
      `forelead: sealed ${secrets.sealedCredentials} repository credential(s) ` +
        `stored in plain text by an earlier version`,
    );
  const created = await ensureRateLimits(store.db, options.rateLimits ?? []);
  if (created.length) console.log(`forelead: created rate limit(s) ${created.join(", ")}`);
  const clock = stack.use("the database clock", await createDbClock(store.db));
  const auditSpool = {
    dir: options.auditSpoolDir ?? (await temporaryDirectory(stack, "forelead-audit-spool-")),
    maxBytes: options.auditSpoolMaxBytes,
    database: spoolDatabaseTag(options.database),
    adoptFrom: options.auditSpoolAdoptFrom,
  };
  const identity = stack.use(
    "identity",
    await createIdentity({
      store,
      trustDomain: options.trustDomain,
      roles: checked.roles,
      issuer: checked.issuer,
      runnerOfflineSeconds: checked.runnerOfflineSeconds,
      auditSpool,
      sso: options.sso,
    }),
  );
  const metrics = stack.use(
    "the metrics",
    createMetrics({
      store,
      audit: identity.audit,
      runnerOfflineSeconds: checked.runnerOfflineSeconds,
    }),
  );
  const code = stack.use(
    "the code host",
    await createCodeHost({
      db: store.db,
      secrets: secrets.box,
      codeDir: options.codeDir || undefined,
      maxBundleBytes: options.maxBundleBytes || undefined,
    }),
  );
  const broker = stack.use(
    "the broker",
    await createBroker({
      store,
      leaseSeconds: options.leaseSeconds,
      runnerOfflineSeconds: checked.runnerOfflineSeconds,
      code,
      secrets: secrets.box,
      sweepIntervalMs: options.sweepIntervalMs || undefined,
      jobTimeouts: options.jobTimeouts,
      batching: options.batching,
      handoff: options.handoff,
      observer: metrics.broker,
    }),
  );
  const inventory = createInventory(store.db);
  const artifactStore = await chooseArtifactStore(checked, store, stack);
  const artifacts = stack.use(
    "artifacts",
    createArtifacts({
      db: store.db,
      store: artifactStore,
      maxArtifactBytes: options.maxArtifactBytes || undefined,
    }),
  );
  const streams = stack.use(
    "streams",
    await createStreams({
      store,
      maxRequestBytes: checked.maxBodyBytes,
      maxRequestMs: options.streamMaxSeconds ? options.streamMaxSeconds * 1000 : undefined,
    }),
  );
  const replica = stack.use(
    "the replica heartbeat",
    await startReplicaHeartbeat(store.db, store.health, buildInfo().version),
  );
  const events = stack.use("the event stream", await createEvents({ store }));
  const retention = stack.use(
    "the retention pruner",
    createRetention({
      store,
      blobs: artifactStore.blobs,
      retentions: options.retentions,
      pruneIntervalMs: options.pruneIntervalMs || undefined,
      observer: metrics.retention,
    }),
  );
  const pauses = createPauses(store.db);
  const webhooks = stack.use(
    "webhooks",
    await createWebhooks(store, secrets.box, options.webhooks ?? {}),
  );
  const jobTokens = options.jobTokens
    ? await openJobTokens(
        options.jobTokens,
        {
          db: store.db,
          trustDomain: options.trustDomain,
          tls: checked.tls,
          limits: checked.connectionLimits,
          clock,
        },
        stack,
      )
    : undefined;
  return {
    store,
    clock,
    identity,
    jobTokens,
    code,
    broker,
    inventory,
    artifacts,
    streams,
    replica,
    events,
    retention,
    pauses,
    metrics,
    webhooks,
  };
}

/**
 * Where artifacts live, decided here and nowhere else: the directory given
 * (--artifacts-dir); else, on a postgres:// database, Postgres rows, so
 * replicas share artifacts as they share jobs; else (the embedded database)
 * files in a private temporary directory (`forelead serve` gives one beside
 * the data directory).
 */
export async function chooseArtifactStore(
  { options }: CheckedOptions,
  store: Store,
  stack: ResourceStack,
): Promise<ArtifactStore> {
  if (options.artifactsDir) return createFileArtifactStore(options.artifactsDir);
  if (isPostgresUrl(options.database)) return createPostgresArtifactStore(store.db);
  return createFileArtifactStore(await temporaryDirectory(stack, "forelead-artifacts-"));
}

/** A fresh directory under the system's temporary directory, removed at unwind. */
async function temporaryDirectory(stack: ResourceStack, prefix: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  stack.defer(`the temporary directory ${dir}`, () => rm(dir, { recursive: true, force: true }));
  return dir;
}
