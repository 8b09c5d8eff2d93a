import { attachTransportFacts, transportFacts } from "../protocol/transport-facts.js";

/**
 * Streamed request messages read a batch at a time. A transport that reads
 * many messages from one piece of input (NDJSON: every line a body chunk
 * ended) hands them on as one array, so each layer between it and `ingest`
 * pays one await per chunk, not one per message. Such an iterable is still an
 * ordinary AsyncIterable of single messages for code that wants those;
 * `batchesOf` reads any AsyncIterable in batches (one message each when the
 * source is not batched, as a generated client's stream is). The batches are
 * the iterable's transport fact `batches` (protocol/transport-facts.ts).
 */

/** An AsyncIterable of messages that can also be read a batch at a time (never an empty batch). */
export interface BatchedMessages<T> extends AsyncIterable<T> {
  /** Stops the source (a request body left unread, see handler-factory.ts). */
  return(value?: unknown): Promise<IteratorResult<T>>;
}

/**
 * Messages as batches from `batches`, an async generator that yields at
 * least one message per batch and is read once, either way.
 */
export function batchedMessages<T>(batches: AsyncGenerator<readonly T[]>): BatchedMessages<T> {
  const messages: BatchedMessages<T> = {
    [Symbol.asyncIterator]: () => singles(batches),
    return: async () => {
      await batches.return(undefined);
      return { done: true, value: undefined };
    },
  };
  attachTransportFacts(messages, { batches: () => batches });
  return messages;
}

/** `messages` a batch at a time. */
export function batchesOf<T>(messages: AsyncIterable<T>): AsyncIterator<readonly T[]> {
  const own = transportFacts(messages).batches as (() => AsyncIterator<readonly T[]>) | undefined;
  if (own) return own();
  const it = messages[Symbol.asyncIterator]();
  return {
    next: () =>
      it
        .next()
        .then((r) =>
          r.done ? { done: true, value: undefined } : { done: false, value: [r.value] },
        ),
    return: async () => {
      await it.return?.();
      return { done: true, value: undefined };
    },
  };
}

/**
 * Each message of `messages` through `f`, still in batches. When `f` throws
 * for a message, the ones before it in its batch are handed on first and the
 * error is thrown at the next read, as a source throwing at that message would.
 */
export function mapMessages<T, U>(
  messages: AsyncIterable<T>,
  f: (message: T) => U,
): BatchedMessages<U> {
  const source = batchesOf(messages);
  async function* mapped(): AsyncGenerator<readonly U[]> {
    try {
      for (let r = await source.next(); !r.done; r = await source.next()) {
        const out: U[] = [];
        let failure: { readonly err: unknown } | undefined;
        for (const m of r.value) {
          try {
            out.push(f(m));
          } catch (err) {
            failure = { err };
            break;
          }
        }
        if (out.length > 0) yield out;
        if (failure) throw failure.err;
      }
    } finally {
      await source.return?.();
    }
  }
  return batchedMessages(mapped());
}

async function* singles<T>(batches: AsyncIterator<readonly T[]>): AsyncGenerator<T> {
  try {
    for (let r = await batches.next(); !r.done; r = await batches.next()) yield* r.value;
  } finally {
    await batches.return?.();
  }
}
