import type { Store } from "../store/database.js";

/** The NOTIFY channel that says "a job may be claimable in workspace <payload>". */
export const jobsChannel = "forelead_jobs";

/**
 * Long-poll wakeups. A waiting claim arms a waiter *before* it tries to
 * claim, so a job enqueued between the try and the wait still wakes it.
 * Notifications come through Postgres LISTEN/NOTIFY, so an enqueue on one
 * replica wakes runners waiting on another (in-process on PGlite).
 */
export interface Wakeups {
  /** Arms a waiter for `workspaceId`; await `wait` for the next notification after arming. */
  arm(workspaceId: string): Waiter;
  close(): Promise<void>;
}

/** One armed waiter. */
export interface Waiter {
  /** Resolves on a notification, after `ms`, or when `signal` aborts. */
  wait(ms: number, signal?: AbortSignal): Promise<void>;
  /** Disarms without waiting. */
  cancel(): void;
}

/** Subscribes to the jobs channel of `store`. */
export async function createWakeups(store: Store): Promise<Wakeups> {
  const waiting = new Map<string, Set<() => void>>();
  const unlisten = await store.listen(jobsChannel, (workspaceId) => {
    const set = waiting.get(workspaceId);
    if (!set) return;
    waiting.delete(workspaceId);
    for (const wake of set) wake();
  });
  return {
    arm(workspaceId) {
      let woken = false;
      let resolveWait: (() => void) | undefined;
      const wake = () => {
        woken = true;
        resolveWait?.();
      };
      let set = waiting.get(workspaceId);
      if (!set) waiting.set(workspaceId, (set = new Set()));
      set.add(wake);
      const disarm = () => waiting.get(workspaceId)?.delete(wake);
      return {
        wait(ms, signal) {
          if (woken || ms <= 0 || signal?.aborted) {
            disarm();
            return Promise.resolve();
          }
          return new Promise<void>((resolve) => {
            const done = () => {
              clearTimeout(timer);
              signal?.removeEventListener("abort", done);
              disarm();
              resolve();
            };
            const timer = setTimeout(done, ms);
            signal?.addEventListener("abort", done, { once: true });
            resolveWait = done;
          });
        },
        cancel: disarm,
      };
    },
    async close() {
      await unlisten();
      for (const set of waiting.values()) for (const wake of set) wake();
      waiting.clear();
    },
  };
}
