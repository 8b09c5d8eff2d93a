import type { Store } from "../store/database.js";
import type { StreamName } from "../store/schema.js";

/**
 * The NOTIFY channel of streams. Payloads: "<stream>:<jobId>" when messages
 * were stored, "settled:<jobId>" when the job settled (sent by the trigger
 * jobs_settled_wakes_followers, forelead_stream_job_settled).
 */
export const streamsChannel = "forelead_streams";

/**
 * Wakes followers of a job when its stream grows or it settles, on any
 * replica; and every follower when the LISTEN connection is back after being
 * down, since what was stored meanwhile was announced to no one.
 */
export interface StreamWakeups {
  /** Arms a waiter before the follower reads, so nothing stored after the read is missed. */
  arm(jobId: string, stream: StreamName): StreamWaiter;
  /** True once closed: followers stop. */
  readonly closed: boolean;
  close(): Promise<void>;
}

/** One armed waiter. */
export interface StreamWaiter {
  /** Resolves true when woken (also when woken before the call), false after `ms` or on abort. */
  wait(ms: number, signal?: AbortSignal): Promise<boolean>;
  /** Disarms. */
  cancel(): void;
}

interface Armed {
  readonly stream: StreamName;
  woken: boolean;
  wake?: () => void;
}

/** Subscribes to the streams channel of `store`; one subscription serves every follower of this process. */
export async function createStreamWakeups(store: Store): Promise<StreamWakeups> {
  const byJob = new Map<string, Set<Armed>>();
  const onNotify = (payload: string) => {
    const colon = payload.indexOf(":");
    const kind = payload.slice(0, colon);
    const waiters = byJob.get(payload.slice(colon + 1));
    if (!waiters) return;
    for (const armed of waiters) {
      if (kind !== "settled" && kind !== armed.stream) continue;
      armed.woken = true;
      armed.wake?.();
    }
  };
  const wakeAll = () => {
    for (const set of byJob.values()) {
      for (const armed of set) {
        armed.woken = true;
        armed.wake?.();
      }
    }
  };
  const unlisten = await store.listen(streamsChannel, onNotify, wakeAll);
  let closed = false;

  return {
    get closed() {
      return closed;
    },
    arm(jobId, stream) {
      const armed: Armed = { stream, woken: closed };
      const set = byJob.get(jobId) ?? new Set();
      set.add(armed);
      byJob.set(jobId, set);
      const disarm = () => {
        set.delete(armed);
        if (set.size === 0 && byJob.get(jobId) === set) byJob.delete(jobId);
      };
      return {
        wait(ms, signal) {
          if (armed.woken || signal?.aborted) return Promise.resolve(armed.woken);
          return new Promise((resolve) => {
            const done = (woken: boolean) => {
              clearTimeout(timer);
              signal?.removeEventListener("abort", aborted);
              armed.wake = undefined;
              resolve(woken);
            };
            const aborted = () => done(false);
            const timer = setTimeout(() => done(false), ms);
            signal?.addEventListener("abort", aborted, { once: true });
            armed.wake = () => done(true);
          });
        },
        cancel: disarm,
      };
    },
    async close() {
      closed = true;
      await unlisten();
      wakeAll();
      byJob.clear();
    },
  };
}
