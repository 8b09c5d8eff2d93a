import { setTimeout as sleep } from "node:timers/promises";
import { Code, ConnectError } from "@connectrpc/connect";

/** Refusals a reconnect cannot cure: the request itself or the identity is wrong. */
const final = new Set([
  Code.InvalidArgument,
  Code.PermissionDenied,
  Code.Unauthenticated,
  Code.NotFound,
  Code.FailedPrecondition,
  Code.Unimplemented,
  Code.OutOfRange,
]);

/**
 * How a follower reads a server stream that it can resume from a cursor (an event id, a log
 * position).
 */
export interface Resumable<T, C> {
  /** Where to start. */
  readonly start: C;
  /** Opens the stream for the items after `cursor`. */
  open(cursor: C): AsyncIterable<T>;
  /** The cursor after `item`. */
  cursorOf(item: T): C;
  /** Handles one item (prints it). */
  onItem(item: T): void;
  /**
   * What a normal end of the stream means: "done" (a job's stream ends when
   * the job settles) or "resume" (the global event stream: it should not end,
   * so it is asked again).
   */
  readonly onEnd: "done" | "resume";
  /** Says, for stderr, what a resume does: e.g. "resuming after event 12". */
  describe(cursor: C): string;
  /** What the follower is, for its messages: "events", "logs of job J". */
  readonly name: string;
  warn(text: string): void;
  /** Ends the follow (it returns the last cursor) when aborted. */
  readonly signal?: AbortSignal;
}

/**
 * Follows a resumable stream: after a dropped connection or a restarted
 * control plane it opens the stream again after the last item it handed
 * on, so every item is handled exactly once and in order. Refusals a
 * reconnect cannot cure (bad request, identity, not found) are thrown.
 * Returns the last cursor.
 */
export async function followResuming<T, C>(r: Resumable<T, C>): Promise<C> {
  let cursor = r.start;
  for (let failures = 0; ; failures++) {
    try {
      for await (const item of r.open(cursor)) {
        cursor = r.cursorOf(item);
        failures = 0;
        r.onItem(item);
      }
      if (r.onEnd === "done") return cursor;
      r.warn(`forelead: ${r.name}: the stream ended; ${r.describe(cursor)}\n`);
    } catch (err) {
      if (r.signal?.aborted) return cursor;
      const error = ConnectError.from(err);
      if (final.has(error.code)) throw error;
      r.warn(`forelead: ${r.name}: connection lost (${error.message}); ${r.describe(cursor)}\n`);
    }
    if (r.signal?.aborted) return cursor;
    await sleep(Math.min(5_000, 100 * 2 ** failures), undefined, { signal: r.signal }).catch(
      () => {},
    );
    if (r.signal?.aborted) return cursor;
  }
}

/**
 * A status line on stderr for a wait: shown only when stderr is a terminal and only once the wait
 * has lasted a second.
 */
export interface StatusLine {
  /** Changes the text. */
  update(text: string): void;
  /** Clears the line (before other output, or at the end). */
  stop(): void;
}

const frames = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

/**
 * Starts a status line with `text` (a spinner and the seconds waited); a no-op when stderr is not a
 * TTY.
 */
export function statusLine(text: string, stream: NodeJS.WriteStream = process.stderr): StatusLine {
  if (!stream.isTTY) return { update: () => {}, stop: () => {} };
  const started = Date.now();
  let shown = false;
  let frame = 0;
  const draw = () => {
    const waited = Math.round((Date.now() - started) / 1000);
    stream.write(`\r\x1b[K${frames[frame++ % frames.length]} ${text} (${waited}s)`);
    shown = true;
  };
  let timer: NodeJS.Timeout | undefined;
  const delay = setTimeout(() => {
    draw();
    timer = setInterval(draw, 100);
    timer.unref();
  }, 1000);
  delay.unref();
  return {
    update: (next) => void (text = next),
    stop: () => {
      clearTimeout(delay);
      clearInterval(timer);
      if (shown) stream.write("\r\x1b[K");
      shown = false;
    },
  };
}
