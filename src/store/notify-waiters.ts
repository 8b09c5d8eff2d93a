import type { Store } from "./database.js";

/**
 * Waiters on a NOTIFY channel: the one way the broker, streams and events wait for "something
 * changed, or the time ran out".
 *
 * The rule: arm a waiter *before* the read it guards, then wait. A wake that comes between the
 * read and the wait is kept, so nothing committed after the read is missed. A wait ends at the
 * first of: a wake (it resolves with the wake's value), an end without a value (`end`), its time,
 * or its signal. When the LISTEN connection was lost and is back, notifications sent meanwhile are
 * lost: every waiter's wait then ends (`listen`), and its read finds what they announced.
 *
 * A held waiter (`hold`) is one a value is on its way to: whatever would end its wait is kept and
 * takes effect at `release`, unless `release` brings the value itself.
 */
interface NotifyWaiter<D, T> {
  /** What the subscriber armed it with (a stream name, a claim's runner). */
  readonly data: D;
  /**
   * Resolves with the wake's value (also one that came before the call), or undefined at `end`,
   * after `ms`, or when `signal` aborts. Returns at once when already woken or ended, `ms` is not
   * positive, or `signal` has aborted.
   */
  wait(ms: number, signal?: AbortSignal): Promise<T | undefined>;
  /** Wakes it with `value`: its wait (the current one or the next) ends with it; it is disarmed. */
  wake(value: T): void;
  /**
   * Ends its wait (the current one or the next) with no value; it stays armed until the wait ends.
   */
  end(): void;
  /** The value of its wake, once woken. */
  readonly woken: T | undefined;
  /** True once a wait() returned the wake's value. */
  readonly delivered: boolean;
  /** True while inside wait() and not held. */
  readonly waiting: boolean;
  readonly held: boolean;
  /** Holds its wait's end (see NotifyWaiter); only while waiting. */
  hold(): void;
  /**
   * Ends the hold: the wait resolves with `value`, or with what ended it meanwhile, or waits on.
   */
  release(value?: T): void;
  /** Disarms without waiting. */
  cancel(): void;
}

/** The armed waiters of one process, by key (a workspace, a job). */
export interface NotifyWaiters<K, D, T> {
  /** Arms a waiter under `key`; arm before the read the wait guards. */
  arm(key: K, data: D): NotifyWaiter<D, T>;
  /** The waiters armed under `key`, first armed first (a copy). */
  armed(key: K): Array<NotifyWaiter<D, T>>;
  /** The first waiter armed under `key` that `test` accepts, without copying. */
  find(key: K, test: (waiter: NotifyWaiter<D, T>) => boolean): NotifyWaiter<D, T> | undefined;
  /** Wakes every armed waiter with `value`. */
  wakeAll(value: T): void;
  /** Ends every armed waiter's wait with no value: each reads again. */
  endAll(): void;
  /** Disarms every waiter, without waking any. */
  clear(): void;
  /**
   * Subscribes to `channel` of `store`: `onNotify` for each notification; when the LISTEN
   * connection is back after being down, `onReconnect`, by default `endAll`. Resolves to the
   * unsubscribe function.
   */
  listen(
    store: Store,
    channel: string,
    onNotify: (payload: string) => void,
    onReconnect?: () => void,
  ): Promise<() => Promise<void>>;
}

/** Creates an empty set of waiters. */
export function createNotifyWaiters<K, D, T>(): NotifyWaiters<K, D, T> {
  const byKey = new Map<K, Set<NotifyWaiter<D, T>>>();
  // Copies: an ended wait disarms itself, taking its waiter out of its set.
  const all = () => [...byKey.values()].flatMap((set) => [...set]);
  const endAll = () => {
    for (const waiter of all()) waiter.end();
  };
  return {
    arm(key, data) {
      const set = byKey.get(key) ?? new Set();
      byKey.set(key, set);
      const disarm = () => {
        set.delete(waiter);
        if (set.size === 0 && byKey.get(key) === set) byKey.delete(key);
      };
      const waiter = createWaiter<D, T>(data, disarm);
      set.add(waiter);
      return waiter;
    },
    armed: (key) => [...(byKey.get(key) ?? [])],
    find(key, test) {
      for (const waiter of byKey.get(key) ?? []) if (test(waiter)) return waiter;
      return undefined;
    },
    wakeAll: (value) => {
      for (const waiter of all()) waiter.wake(value);
    },
    endAll,
    clear: () => byKey.clear(),
    listen: (store, channel, onNotify, onReconnect = endAll) =>
      store.listen(channel, onNotify, onReconnect),
  };
}

function createWaiter<D, T>(data: D, disarm: () => void): NotifyWaiter<D, T> {
  let woken: T | undefined;
  let ended = false;
  let delivered = false;
  let inWait = false;
  let held = false;
  // While held: what ended the wait meanwhile (a wake, or undefined), to end it with at release.
  let heldEnd: { readonly value: T | undefined } | undefined;
  let endWait: ((value: T | undefined) => void) | undefined;
  let resolveWith: ((value: T) => void) | undefined;
  return {
    data,
    get woken() {
      return woken;
    },
    get delivered() {
      return delivered;
    },
    get waiting() {
      return inWait && !held;
    },
    get held() {
      return held;
    },
    wait(ms, signal) {
      if (woken !== undefined || ended || ms <= 0 || signal?.aborted) {
        disarm();
        delivered = woken !== undefined;
        return Promise.resolve(woken);
      }
      return new Promise((resolve) => {
        const finish = (value: T | undefined) => {
          inWait = false;
          endWait = resolveWith = undefined;
          clearTimeout(timer);
          signal?.removeEventListener("abort", aborted);
          disarm();
          resolve(value);
        };
        const done = (value: T | undefined) => {
          if (held) {
            heldEnd ??= { value };
            return;
          }
          delivered = value !== undefined;
          finish(value);
        };
        const aborted = () => done(undefined);
        const timer = setTimeout(() => done(undefined), ms);
        signal?.addEventListener("abort", aborted, { once: true });
        inWait = true;
        endWait = done;
        resolveWith = finish;
      });
    },
    wake(value) {
      disarm();
      woken = value;
      endWait?.(value);
    },
    end() {
      ended = true;
      endWait?.(undefined);
    },
    hold() {
      held = true;
    },
    release(value) {
      held = false;
      if (value !== undefined) resolveWith?.(value);
      else if (heldEnd) endWait?.(heldEnd.value);
    },
    cancel: disarm,
  };
}
