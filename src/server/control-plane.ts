import { resolve } from "node:path";
import type { Artifacts } from "../artifacts/artifacts.js";
import type { Broker } from "../broker/broker.js";
import type { AuditSink } from "../identity/audit.js";
import { lockDirectory } from "../store/data-dir-lock.js";
import { isPostgresUrl, type Store } from "../store/database.js";
import { bindServices } from "./bind-services.js";
import { buildDomain } from "./domain.js";
import { listen } from "./listener.js";
import { serveMetrics, type MetricsServer } from "./metrics/http.js";
import type { ConnectionCounters } from "./connection-limits.js";
import { checkOptions, type ControlPlaneOptions } from "./options.js";
import { createResourceStack, type ResourceStack } from "./resource-stack.js";
import type { TlsMaterial } from "./tls-material.js";

export type { ControlPlaneOptions } from "./options.js";

/** A running control plane. */
export interface ControlPlane {
  readonly url: string;
  readonly port: number;
  readonly store: Store;
  readonly audit: AuditSink;
  readonly broker: Broker;
  /** The issuer's description, or undefined when it has none. */
  readonly issuer: string | undefined;
  readonly artifacts: Artifacts;
  /** The TLS material being served: reload it, describe it, count refused reloads. */
  readonly tls: TlsMaterial;
  /** What the connection limits cut, and how many clients left before their reply (live counts). */
  readonly connections: ConnectionCounters;
  /** The plain-HTTP metrics and health listener, when options.metricsListen asked for one. */
  readonly metrics: MetricsServer | undefined;
  /** The job-token issuer, when options.jobTokens asked for one. */
  readonly jobTokens:
    | {
        readonly issuerUrl: string;
        readonly discoveryUrl?: string;
        /** What the connection limits cut on the discovery listener (live counts). */
        readonly discoveryConnections?: ConnectionCounters;
      }
    | undefined;
  /**
   * Stops accepting, closes client sessions, then everything else it opened,
   * newest first, down to the database; rejects with an UnwindError naming
   * each close that failed (after running the others).
   */
  close(): Promise<void>;
}

/**
 * Starts a control plane: checks the options, builds the domain on the
 * database (migrated), binds the services and listens. Everything opened is
 * on one resource stack: close() unwinds it, and so does a start that fails
 * part way, so a failed start leaves nothing open.
 */
export async function startControlPlane(options: ControlPlaneOptions): Promise<ControlPlane> {
  const checked = await checkOptions(options);
  const stack = createResourceStack();
  try {
    lockEmbeddedDatabase(options.database, stack);
    const domain = await buildDomain(checked, stack);
    const listener = await listen(
      options,
      checked.tls,
      checked.connectionLimits,
      bindServices(checked, domain),
      stack,
      () => {
        domain.broker.endWatches();
        return Promise.all([domain.streams.close(), domain.events.close()]).then(() => {});
      },
    );
    const metrics = options.metricsListen
      ? await serveMetrics(options.metricsListen, domain.metrics, stack)
      : undefined;
    return {
      url: listener.url,
      port: listener.port,
      store: domain.store,
      audit: domain.identity.audit,
      broker: domain.broker,
      issuer: checked.issuer?.description,
      artifacts: domain.artifacts,
      tls: checked.tls,
      connections: listener.counters,
      metrics,
      jobTokens: domain.jobTokens,
      close: () => stack.unwind(),
    };
  } catch (err) {
    // The start's own error is the one to throw; a close that also failed is reported beside it.
    await stack
      .unwind()
      .catch((unwound: unknown) =>
        console.error(`forelead: after a failed start, ${(unwound as Error).message}`),
      );
    throw err;
  }
}

/**
 * One process per embedded data directory: locked before the database or the
 * port is touched (src/store/data-dir-lock.ts), released last at unwind.
 * Postgres is shared by design (replicas) and memory:// is private.
 */
function lockEmbeddedDatabase(database: string, stack: ResourceStack): void {
  if (isPostgresUrl(database) || database === "memory://") return;
  stack.use(
    "the data directory lock",
    lockDirectory(resolve(database), "forelead serve", "stop it or use another --database"),
  );
}
