import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createArtifacts } from "../artifacts/artifacts.js";
import { createBroker } from "../broker/broker.js";
import { createCodeHost } from "../code/code-host.js";
import { createIdentity } from "../identity/identity.js";
import { createInventory } from "../inventory/inventory.js";
import { openStore } from "../store/database.js";
import { createDbClock } from "../store/db-clock.js";
import { createStreams } from "../streams/streams.js";
import type { CheckedOptions } from "./options.js";
import type { ResourceStack } from "./resource-stack.js";

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
  const store = stack.use("the database", await openStore(options.database));
  const clock = stack.use("the database clock", await createDbClock(store.db));
  const auditSpool = { dir: options.auditSpoolDir ?? (await temporaryDirectory(stack, "forelead-audit-spool-")), ...(options.auditSpoolMaxBytes ? { maxBytes: options.auditSpoolMaxBytes } : {}) };
  const identity = stack.use("identity", await createIdentity({ store, trustDomain: options.trustDomain, roles: checked.roles, issuer: checked.issuer, auditSpool }));
  const code = stack.use("the code host", await createCodeHost({ db: store.db, ...(options.codeDir ? { codeDir: options.codeDir } : {}), ...(options.maxBundleBytes ? { maxBundleBytes: options.maxBundleBytes } : {}) }));
  const broker = stack.use("the broker", await createBroker({ store, leaseSeconds: options.leaseSeconds, code, ...(options.sweepIntervalMs ? { sweepIntervalMs: options.sweepIntervalMs } : {}), ...(options.batching ? { batching: options.batching } : {}) }));
  const inventory = createInventory(store.db);
  const artifactsDir = options.artifactsDir ?? (await temporaryDirectory(stack, "forelead-artifacts-"));
  const artifacts = stack.use("artifacts", await createArtifacts({ db: store.db, dir: artifactsDir, ...(options.maxArtifactBytes ? { maxArtifactBytes: options.maxArtifactBytes } : {}) }));
  const streams = stack.use("streams", await createStreams({ store, maxRequestBytes: checked.maxBodyBytes, ...(options.streamMaxSeconds ? { maxRequestMs: options.streamMaxSeconds * 1000 } : {}) }));
  return { store, clock, identity, code, broker, inventory, artifacts, streams };
}

/** A fresh directory under the system's temporary directory, removed at unwind. */
async function temporaryDirectory(stack: ResourceStack, prefix: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  stack.defer(`the temporary directory ${dir}`, () => rm(dir, { recursive: true, force: true }));
  return dir;
}
