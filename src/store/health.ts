import { isDatabaseUnreachable } from "./unreachable.js";

/**
 * Whether the database can be reached, as the last operations found. It
 * turns "unreachable" at the first failure that says so and logs one line
 * (what failed, the URL without password); it turns "reachable" at the first
 * success of an operation that started after that, or of its own probe, and
 * logs one line with how long the outage lasted. Never one line per request.
 */
export interface DatabaseHealth {
  /** True from the first unreachable error until the database answers again. */
  readonly unreachable: boolean;
  /**
   * Reports that `what` ("a query", "the LISTEN connection") failed with
   * `err`; true when the error says the database is unreachable (the caller
   * then need not log it).
   */
  failed(what: string, err: unknown): boolean;
  /** Reports that an operation begun at `startedAt` (performance.now()) succeeded. */
  succeeded(startedAt: number): void;
  /** Calls `listener` each time the database is reachable again; returns the unsubscribe. */
  onReachable(listener: () => void): () => void;
  /** Stops probing. */
  close(): void;
}

/** Options of createDatabaseHealth. */
export interface DatabaseHealthOptions {
  /** The database, safe to log (no password). */
  readonly description: string;
  /** One cheap round trip (`select 1`); run while unreachable until it succeeds. */
  readonly probe: () => Promise<unknown>;
  /** Milliseconds between probes, jittered by up to half (default 400). */
  readonly probeIntervalMs?: number;
}

/** A tracker that starts out reachable. */
export function createDatabaseHealth(options: DatabaseHealthOptions): DatabaseHealth {
  const intervalMs = options.probeIntervalMs ?? 400;
  const listeners = new Set<() => void>();
  let downSince: number | undefined;
  let timer: NodeJS.Timeout | undefined;
  let probing = false;
  let closed = false;

  const reachable = () => {
    if (downSince === undefined) return;
    const seconds = (performance.now() - downSince) / 1000;
    downSince = undefined;
    clearTimeout(timer);
    timer = undefined;
    console.error(`database: ${options.description} reachable again after ${seconds.toFixed(1)} s`);
    for (const listener of listeners) listener();
  };

  // One probe at a time, a jittered interval apart, so probes of many replicas do not line up.
  const scheduleProbe = () => {
    if (closed || downSince === undefined || timer || probing) return;
    timer = setTimeout(
      () => {
        timer = undefined;
        probing = true;
        const startedAt = performance.now();
        options.probe().then(
          () => {
            probing = false;
            health.succeeded(startedAt);
          },
          () => {
            probing = false;
            scheduleProbe();
          },
        );
      },
      intervalMs * (0.5 + Math.random() / 2),
    );
    timer.unref();
  };

  const health: DatabaseHealth = {
    get unreachable() {
      return downSince !== undefined;
    },
    failed(what, err) {
      if (!isDatabaseUnreachable(err)) return false;
      if (downSince === undefined && !closed) {
        downSince = performance.now();
        console.error(
          `database: ${options.description} is unreachable (${what} failed: ` +
            `${err instanceof Error ? err.message : String(err)}); requests that ` +
            `need it are answered 503 until it is back`,
        );
        scheduleProbe();
      }
      return true;
    },
    succeeded(startedAt) {
      // An operation begun before the outage may still finish during it: it proves nothing.
      if (downSince !== undefined && startedAt >= downSince) reachable();
    },
    onReachable(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    close() {
      closed = true;
      clearTimeout(timer);
    },
  };
  return health;
}
