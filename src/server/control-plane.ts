import type { Artifacts } from "../artifacts/artifacts.js";
import type { Broker } from "../broker/broker.js";
import type { AuditSink } from "../identity/audit.js";
import type { Store } from "../store/database.js";
import { bindServices } from "./bind-services.js";
import { buildDomain } from "./domain.js";
import { listen } from "./listener.js";
import type { ConnectionCounters } from "./connection-limits.js";
import { checkOptions, type ControlPlaneOptions } from "./options.js";
import { createResourceStack } from "./resource-stack.js";

export type { ControlPlaneOptions } from "./options.js";
export type { ConnectionCounters, ConnectionLimits } from "./connection-limits.js";

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
  /** What the connection limits cut, and how many clients left before their reply (live counts). */
  readonly connections: ConnectionCounters;
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
    const domain = await buildDomain(checked, stack);
    const listener = await listen(options, checked.connectionLimits, bindServices(checked, domain), stack, () => domain.streams.close());
    return {
      url: listener.url,
      port: listener.port,
      store: domain.store,
      audit: domain.identity.audit,
      broker: domain.broker,
      issuer: checked.issuer?.description,
      artifacts: domain.artifacts,
      connections: listener.counters,
      close: () => stack.unwind(),
    };
  } catch (err) {
    // The start's own error is the one to throw; a close that also failed is reported beside it.
    await stack.unwind().catch((unwound: unknown) => console.error(`forelead: after a failed start, ${(unwound as Error).message}`));
    throw err;
  }
}
