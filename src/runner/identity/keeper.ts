// Keeps the runner's identity renewed at about half its lifetime over mTLS.
// After a renewal the caller opens a new HTTP/2 connection: TLS reads a
// certificate only on a new handshake.
import http2 from "node:http2";
import {
  renew,
  tlsOptions,
  type ControlPlaneEndpoint,
  type RunnerKeyAlgorithm,
} from "./enrollment.js";
import type { RunnerIdentity } from "./runner-identity.js";

/**
 * Milliseconds until the identity should be renewed: half its lifetime, with
 * ±10 % jitter so a fleet enrolled together does not renew together.
 */
export function renewalDelayMs(
  identity: Pick<RunnerIdentity, "notBefore" | "notAfter">,
  now = Date.now(),
  random = Math.random,
): number {
  const start = identity.notBefore.getTime();
  const lifetime = identity.notAfter.getTime() - start;
  return Math.max(0, start + lifetime * (0.5 + (random() - 0.5) * 0.2) - now);
}

/** Keeps an identity renewed in the background. */
export interface IdentityKeeper {
  current(): RunnerIdentity;
  /** Called with each new identity: open new connections with it. Returns an unsubscribe function. */
  onRenewed(listener: (identity: RunnerIdentity) => void): () => void;
  /** Renews now (the timer calls this too). */
  renewNow(): Promise<RunnerIdentity>;
  stop(): void;
}

/** Options of keepIdentityFresh. */
export interface KeeperOptions {
  readonly stateDir: string;
  readonly keyAlgorithm?: RunnerKeyAlgorithm;
  /** Told about each failed renewal; the keeper retries with backoff until the certificate expires. */
  readonly onError?: (err: Error, retryInMs: number | undefined) => void;
}

/**
 * Renews `identity` at about half its lifetime (renewalDelayMs), then keeps
 * renewing each new one. A failed renewal is retried after 5 s, doubling up
 * to 5 min, while the certificate is still valid; a refusal that says the
 * runner is retired stops it.
 */
export function keepIdentityFresh(
  endpoint: ControlPlaneEndpoint,
  identity: RunnerIdentity,
  options: KeeperOptions,
): IdentityKeeper {
  let current = identity;
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  let failures = 0;
  const listeners = new Set<(identity: RunnerIdentity) => void>();
  const schedule = (ms: number) => {
    if (stopped) return;
    clearTimeout(timer);
    timer = setTimeout(() => void renewNow().catch(() => {}), ms);
    timer.unref();
  };
  const renewNow = async () => {
    try {
      current = await renew(endpoint, current, options.stateDir, options.keyAlgorithm);
    } catch (err) {
      failures++;
      const backoff = Math.min(5_000 * 2 ** (failures - 1), 300_000);
      const retry =
        /retired/.test((err as Error).message) || current.notAfter.getTime() <= Date.now()
          ? undefined
          : backoff;
      options.onError?.(err as Error, retry);
      if (retry !== undefined) schedule(retry);
      throw err;
    }
    failures = 0;
    schedule(renewalDelayMs(current));
    for (const l of listeners) l(current);
    return current;
  };
  schedule(renewalDelayMs(current));
  return {
    current: () => current,
    onRenewed(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    renewNow,
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
  };
}

/** One HTTP/2 connection that follows the keeper: after each renewal, requests go on a new connection. */
export interface RunnerConnection {
  /** The session of the current certificate, (re)opened when needed. */
  session(): http2.ClientHttp2Session;
  close(): Promise<void>;
}

/**
 * Opens connections with the keeper's identity. On renewal the next request
 * opens a new connection (a new handshake, so the new certificate); the old
 * one is closed gracefully, letting its streams in flight finish.
 */
export function connectWithIdentity(
  endpoint: ControlPlaneEndpoint,
  keeper: IdentityKeeper,
): RunnerConnection {
  let open: http2.ClientHttp2Session | undefined;
  const unsubscribe = keeper.onRenewed(() => {
    open?.close();
    open = undefined;
  });
  return {
    session() {
      if (!open || open.closed || open.destroyed) {
        const s = http2.connect(endpoint.server, tlsOptions(endpoint, keeper.current()));
        s.on("error", () => {}); // surfaced on the request that meets it
        s.once("close", () => open === s && (open = undefined));
        open = s;
      }
      return open;
    },
    async close() {
      unsubscribe();
      const s = open;
      open = undefined;
      if (s && !s.closed) await new Promise<void>((resolve) => s.close(() => resolve()));
    },
  };
}
