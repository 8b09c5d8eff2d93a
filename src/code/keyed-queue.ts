/** Runs functions one at a time per key; different keys run side by side. */
export interface KeyedQueue {
  run<T>(key: string, fn: () => Promise<T>): Promise<T>;
}

/**
 * A queue per key, forgotten once it drains. Failures do not block the functions queued after them.
 */
export function createKeyedQueue(): KeyedQueue {
  const tails = new Map<string, Promise<unknown>>();
  return {
    run<T>(key: string, fn: () => Promise<T>): Promise<T> {
      const next = (tails.get(key) ?? Promise.resolve()).then(fn, fn);
      const tail = next.catch(() => undefined);
      tails.set(key, tail);
      void tail.then(() => {
        if (tails.get(key) === tail) tails.delete(key);
      });
      return next;
    },
  };
}
