import { Code, ConnectError } from "@connectrpc/connect";
import type { Store } from "../store/database.js";
import { createNotifyWaiters } from "../store/notify-waiters.js";
import {
  checkEventQuery,
  readEvents,
  type EventEntry,
  type EventQuery,
  type ReadPosition,
} from "./read.js";
import { eventsChannel } from "./record.js";

/**
 * The global event stream: reading and following. Writing is record.ts, in the writers'
 * transactions; retention is src/ops/retention.ts.
 */
export interface Events {
  /** The events after `query.afterId` that have committed, in order, up to a page. */
  read(query: EventQuery): AsyncIterable<EventEntry>;
  /**
   * Every event after `query.afterId`, in order, as it commits, until `signal` aborts (or
   * unavailable on close).
   */
  follow(query: EventQuery, signal?: AbortSignal): AsyncIterable<EventEntry>;
  close(): Promise<void>;
}

/** Options of the event stream. */
export interface EventsOptions {
  readonly store: Store;
  /**
   * A follower reads again after this long without a notification: a safety net, not the way it
   * learns.
   */
  readonly followPollMs?: number;
}

/**
 * While a gap is open, a follower looks again this often: a rolled-back writer sends no
 * notification.
 */
const gapRecheckMs = 100;

/** Subscribes to the events channel (one LISTEN per process serves every follower). */
export async function createEvents(options: EventsOptions): Promise<Events> {
  const { db } = options.store;
  const followPollMs = options.followPollMs ?? 5_000;
  // One waiter a follower, armed before each read: a commit after the read ends its wait.
  const waiters = createNotifyWaiters<undefined, undefined, true>();
  const wakeAll = () => waiters.wakeAll(true);
  const unlisten = await waiters.listen(options.store, eventsChannel, wakeAll, wakeAll);
  let closed = false;

  async function* entries(
    query: EventQuery,
    follow: boolean,
    signal?: AbortSignal,
  ): AsyncGenerator<EventEntry> {
    const q = checkEventQuery(query);
    let pos: ReadPosition = { afterId: q.afterId, finalThrough: q.afterId };
    let sent = 0;
    for (;;) {
      const waiter = waiters.arm(undefined, undefined);
      try {
        const page = await readEvents(db, q, pos);
        pos = page.pos;
        for (const e of page.entries) {
          yield e;
          if (!follow && ++sent >= q.pageSize) return;
        }
        if (page.full && !page.open) continue;
        if (signal?.aborted) return;
        if (!follow && !page.open) return;
        if (closed)
          throw new ConnectError(
            "the control plane is shutting down; follow again after the last event id",
            Code.Unavailable,
          );
        await waiter.wait(page.open ? gapRecheckMs : followPollMs, signal);
      } finally {
        waiter.cancel();
      }
    }
  }

  return {
    read: (query) => entries(query, false),
    follow: (query, signal) => entries(query, true, signal),
    async close() {
      if (closed) return;
      closed = true;
      wakeAll();
      await unlisten();
    },
  };
}
