// Keeps the runner's identity renewed at about half its lifetime over mTLS.
// TLS presents a certificate only on a new handshake: after a renewal the
// caller has its connections reopen (`forelead runner` calls reconnect() on
// its REST transport and its Connect client, cli/runner.ts).
import { renew, type ControlPlaneEndpoint, type RunnerKeyAlgorithm } from "./enrollment.js";
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
  /**
   * Called with each new identity: open new connections with it. Returns an unsubscribe function.
   */
  onRenewed(listener: (identity: RunnerIdentity) => void): () => void;
  /** Renews now (the timer calls this too). */
  renewNow(): Promise<RunnerIdentity>;
  stop(): void;
}

/** Options of keepIdentityFresh. */
export interface KeeperOptions {
  readonly stateDir: string;
  readonly keyAlgorithm?: RunnerKeyAlgorithm;
  /**
   * Told about each failed renewal; the keeper retries with backoff until the certificate expires.
   */
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
