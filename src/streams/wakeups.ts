import type { Store } from "../store/database.js";
import { createNotifyWaiters } from "../store/notify-waiters.js";
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
interface StreamWaiter {
  /** Resolves true when woken (also when woken before the call), false after `ms` or on abort. */
  wait(ms: number, signal?: AbortSignal): Promise<boolean>;
  /** Disarms. */
  cancel(): void;
}

/**
 * Subscribes to the streams channel of `store`; one subscription serves every follower of this
 * process.
 */
export async function createStreamWakeups(store: Store): Promise<StreamWakeups> {
  const waiters = createNotifyWaiters<string, StreamName, true>();
  const onNotify = (payload: string) => {
    const colon = payload.indexOf(":");
    const kind = payload.slice(0, colon);
    for (const waiter of waiters.armed(payload.slice(colon + 1)))
      if (kind === "settled" || kind === waiter.data) waiter.wake(true);
  };
  const unlisten = await waiters.listen(store, streamsChannel, onNotify, () =>
    waiters.wakeAll(true),
  );
  let closed = false;

  return {
    get closed() {
      return closed;
    },
    arm(jobId, stream) {
      const waiter = waiters.arm(jobId, stream);
      if (closed) waiter.wake(true);
      return {
        wait: async (ms, signal) => (await waiter.wait(ms, signal)) === true,
        cancel: () => waiter.cancel(),
      };
    },
    async close() {
      closed = true;
      await unlisten();
      waiters.wakeAll(true);
      waiters.clear();
    },
  };
}
