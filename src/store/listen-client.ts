import pg from "pg";
import type { DatabaseHealth } from "./health.js";

/** Handlers of one subscription to a channel. */
interface Subscription {
  readonly onNotify: (payload: string) => void;
  /**
   * Called after a reconnect: notifications sent while the connection was down are lost, so look
   * again.
   */
  readonly onRecheck?: () => void;
}

/** The one LISTEN connection of a Postgres store, shared by every channel. */
export interface ListenClient {
  /**
   * Subscribes; resolves once the channel is LISTENed (or will be, on the reconnect under way);
   * resolves to the unsubscribe.
   */
  listen(channel: string, subscription: Subscription): Promise<() => void>;
  /** True while the connection is up with every channel LISTENed (readiness, metrics). */
  readonly connected: boolean;
  close(): Promise<void>;
}

/**
 * Reconnect delays: doubling from 100 ms to at most 1 s, each between half and all of that ("equal
 * jitter").
 */
const firstDelayMs = 100;
const maxDelayMs = 1_000;

/**
 * A LISTEN connection that heals: when it fails it reconnects with jittered
 * backoff, at once when the health tracker sees the database answer again,
 * re-LISTENs every channel and then asks every subscription to recheck. The
 * first connect is made by the first listen() and fails it, so a start-up
 * with an unreachable database still fails loudly.
 */
export function createListenClient(url: string, health: DatabaseHealth): ListenClient {
  const channels = new Map<string, Set<Subscription>>();
  let client: pg.Client | undefined;
  /** The channels LISTENed on `client`. */
  let listening = new Set<string>();
  let connecting: Promise<pg.Client> | undefined;
  let retryTimer: NodeJS.Timeout | undefined;
  let attempt = 0;
  let closed = false;

  const lose = (lost: pg.Client, err: Error) => {
    if (client !== lost) return;
    client = undefined;
    if (!health.failed("the LISTEN connection", err))
      console.error(`database: the LISTEN connection failed: ${err.message}; reconnecting`);
    void lost.end().catch(() => {});
    scheduleReconnect();
  };

  const connect = async (): Promise<pg.Client> => {
    // keepAlive: a peer that vanished without closing the socket is noticed, and reconnected.
    const next = new pg.Client({ connectionString: url, keepAlive: true });
    const lost = (err: Error) => lose(next, err);
    next.on("notification", (n) =>
      channels.get(n.channel)?.forEach((s) => s.onNotify(n.payload ?? "")),
    );
    next.on("error", lost);
    next.on("end", () => lost(new Error("Connection terminated")));
    try {
      await next.connect();
      listening = new Set();
      client = next;
      await listenAll(next);
    } catch (err) {
      if (client === next) client = undefined;
      await next.end().catch(() => {});
      throw err;
    }
    return next;
  };

  const listenAll = async (on: pg.Client) => {
    for (const channel of channels.keys()) {
      if (listening.has(channel)) continue;
      listening.add(channel);
      await on.query(`LISTEN ${checkedChannel(channel)}`);
    }
  };

  const reconnect = () => {
    clearTimeout(retryTimer);
    retryTimer = undefined;
    if (closed || client || connecting) return;
    const startedAt = performance.now();
    connecting = connect();
    connecting.then(
      () => {
        connecting = undefined;
        attempt = 0;
        health.succeeded(startedAt);
        if (closed) return;
        for (const subscriptions of channels.values())
          for (const s of subscriptions) s.onRecheck?.();
      },
      (err: unknown) => {
        connecting = undefined;
        if (!health.failed("reconnecting the LISTEN connection", err))
          console.error(
            `database: could not reconnect the LISTEN connection: ${(err as Error).message}`,
          );
        scheduleReconnect();
      },
    );
  };

  const scheduleReconnect = () => {
    if (closed || retryTimer || connecting) return;
    const ceiling = Math.min(maxDelayMs, firstDelayMs * 2 ** attempt++);
    retryTimer = setTimeout(reconnect, ceiling * (0.5 + Math.random() / 2));
    retryTimer.unref();
  };

  // Back after an outage the pool saw: reconnect now if this connection failed too, or prove it did
  // not.
  const unsubscribeReachable = health.onReachable(() => {
    const current = client;
    if (current) void current.query("select 1").catch((err: Error) => lose(current, err));
    else reconnect();
  });

  return {
    get connected() {
      return client !== undefined && [...channels.keys()].every((c) => listening.has(c));
    },
    async listen(channel, subscription) {
      checkedChannel(channel);
      const subscriptions = channels.get(channel) ?? new Set();
      channels.set(channel, subscriptions);
      subscriptions.add(subscription);
      const unsubscribe = () => void subscriptions.delete(subscription);
      if (!client && !connecting && !retryTimer) {
        // The first subscription: connect now, and let a failure fail the caller (the start).
        connecting = connect().finally(() => (connecting = undefined));
        await connecting;
        return unsubscribe;
      }
      // A new channel on a live connection; a failure there is the connection's, and its reconnect
      // LISTENs the channel.
      await connecting?.catch(() => {});
      if (client)
        await listenAll(client).catch((err: unknown) => void health.failed("LISTEN", err));
      return unsubscribe;
    },
    async close() {
      closed = true;
      unsubscribeReachable();
      clearTimeout(retryTimer);
      await connecting?.catch(() => {});
      const last = client;
      client = undefined;
      await last?.end().catch(() => {});
    },
  };
}

/** Channel names are fixed identifiers in the code; refuse anything else rather than quote it. */
function checkedChannel(channel: string): string {
  if (!/^[a-z_][a-z0-9_]{0,62}$/.test(channel))
    throw new Error(`invalid LISTEN channel name ${JSON.stringify(channel)}`);
  return channel;
}
