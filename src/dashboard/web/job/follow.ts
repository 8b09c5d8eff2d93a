import { Code, ConnectError } from "@connectrpc/connect";

/**
 * Following a server stream that resumes from a cursor (docs/streams.md, "Reading and
 * following"): a job's log or events with `follow`, read on from the last entry's
 * `position` as `after`. When the connection drops, the follower opens the stream again
 * from the last entry it delivered, so nothing is read twice and nothing is skipped; the
 * server's `after` is the one rule of where to resume, the follower only remembers it.
 *
 * Ends when the stream ends (the job settled and every entry was sent), when `stop()` is
 * called, or at an error retrying cannot mend (the identity lacks the role, the job is
 * unknown, the request is refused): those are reported, never retried.
 */

/** Errors no retry can mend: the reply would be the same. */
const finalCodes: ReadonlySet<Code> = new Set([
  Code.InvalidArgument,
  Code.NotFound,
  Code.AlreadyExists,
  Code.PermissionDenied,
  Code.FailedPrecondition,
  Code.OutOfRange,
  Code.Unimplemented,
  Code.Unauthenticated,
]);

/** Whether following may go on after `err`: connection lost, timeouts, a restarting server. */
function isRetryable(err: unknown): boolean {
  return !finalCodes.has(ConnectError.from(err).code);
}

export type FollowState =
  | { readonly kind: "live" }
  | { readonly kind: "reconnecting"; readonly attempt: number; readonly error: ConnectError }
  | { readonly kind: "ended" }
  | { readonly kind: "stopped" }
  | { readonly kind: "failed"; readonly error: ConnectError };

export interface FollowOptions<E> {
  /** Opens the stream from `after` ("" for the start); aborts with `signal`. */
  readonly open: (after: string, signal: AbortSignal) => AsyncIterable<E>;
  /** The cursor to resume after, of an entry (its `position`). */
  readonly cursor: (entry: E) => string;
  /** Each entry, once, in order. */
  readonly onEntry: (entry: E) => void;
  readonly onState?: (state: FollowState) => void;
  /** Where to start ("" for the beginning). */
  readonly after?: string;
  /** Delay before the n-th consecutive reconnect (1-based), ms. */
  readonly backoffMs?: (attempt: number) => number;
  /** Waits `ms` or until `signal` aborts; injectable so tests need no clock. */
  readonly wait?: (ms: number, signal: AbortSignal) => Promise<void>;
}

export interface Follower {
  /** Settles with the final state: ended, stopped or failed. */
  readonly done: Promise<FollowState>;
  /** The cursor of the last entry delivered ("" before any). */
  readonly after: () => string;
  readonly stop: () => void;
}

/** 0.5 s, 1 s, 2 s … at most 10 s between reconnects. */
function defaultBackoffMs(attempt: number): number {
  return Math.min(10_000, 500 * 2 ** Math.max(0, attempt - 1));
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done);
  });
}

export function follow<E>(options: FollowOptions<E>): Follower {
  const controller = new AbortController();
  const { signal } = controller;
  const backoff = options.backoffMs ?? defaultBackoffMs;
  const wait = options.wait ?? sleep;
  let after = options.after ?? "";
  const report = (state: FollowState) => {
    options.onState?.(state);
    return state;
  };

  async function run(): Promise<FollowState> {
    let failures = 0;
    for (;;) {
      try {
        let announced = false;
        for await (const entry of options.open(after, signal)) {
          if (signal.aborted) break;
          if (!announced) {
            announced = true;
            failures = 0;
            report({ kind: "live" });
          }
          after = options.cursor(entry);
          options.onEntry(entry);
        }
        if (signal.aborted) return report({ kind: "stopped" });
        return report({ kind: "ended" });
      } catch (err) {
        if (signal.aborted) return report({ kind: "stopped" });
        const error = ConnectError.from(err);
        if (!isRetryable(error)) return report({ kind: "failed", error });
        failures += 1;
        report({ kind: "reconnecting", attempt: failures, error });
        await wait(backoff(failures), signal);
        if (signal.aborted) return report({ kind: "stopped" });
      }
    }
  }

  return { done: run(), after: () => after, stop: () => controller.abort() };
}
