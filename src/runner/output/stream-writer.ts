import type { JsonValue } from "@bufbuild/protobuf";
import type { NdjsonPost, NdjsonReply } from "../transport/ndjson-post.js";

/** The header in which the control plane names the last accepted sequence of a rejected request. */
export const lastAcceptedHeader = "forelead-last-accepted-sequence";

/** What a lease's writer needs. */
export interface StreamWriterOptions {
  readonly post: NdjsonPost;
  readonly runnerId: string;
  readonly jobId: string;
  readonly leaseToken: string;
  /**
   * Most bytes in one request body; under the control plane's 1 MiB bound by default (1,000,000).
   */
  readonly maxRequestBytes?: number;
  /**
   * A request with no reply after this long is given up and retried; 20 s by default, under the 25
   * s bound.
   */
  readonly requestTimeoutMs?: number;
  /**
   * Retries of a request that got no reply or a 5xx/429, with backoff, before the stream fails; 8
   * by default.
   */
  readonly maxRetries?: number;
  /** First backoff; doubles up to 5 s. 100 ms by default. */
  readonly backoffMs?: number;
  /**
   * Most lines held unconfirmed (e.g. while the control plane is unreachable); past it the oldest
   * are dropped. Unbounded by default.
   */
  readonly maxQueuedLines?: number;
  /** Told each time a line is dropped for `maxQueuedLines`. */
  readonly onDropped?: () => void;
  /** Told once, when the stream fails (not when it is abandoned). */
  readonly onFailure?: (err: Error) => void;
}

/** The control plane refused a request and stored nothing new: the stream has failed. */
export class StreamRefused extends Error {
  constructor(
    message: string,
    /**
     * The HTTP status of the refusal (409 lease gone or repeated sequence, 413, 501 not served,
     * ...).
     */
    readonly status: number,
  ) {
    super(message);
    this.name = "StreamRefused";
  }
}

/** One stream (events or logs) of one lease. */
export interface StreamWriter {
  /**
   * Queues `data` with the next sequence and returns it; throws when the stream failed or the line
   * alone is over the request bound.
   */
  write(data: JsonValue): number;
  /**
   * Resolves once everything written so far is stored; rejects with the reason when the stream
   * failed.
   */
  flush(): Promise<void>;
  /** The highest sequence the control plane has confirmed. */
  readonly confirmed: number;
  /** Why the stream stopped, once it has. */
  readonly failure: Error | undefined;
  /** Lines written and not yet confirmed. */
  readonly queued: number;
  /**
   * The lease is gone: drops what is queued, sends nothing more; flush() rejects and write() throws
   * from now on.
   */
  abandon(): void;
}

interface Queued {
  readonly sequence: number;
  readonly line: string;
}

/**
 * A writer for one stream of one lease. Lines are batched: whatever is
 * queued when the previous request ends goes in the next one, up to the
 * byte bound, so a quiet job sends a line at once and a chatty one sends
 * large requests. One request is in flight per stream.
 *
 * Resuming: a rejected request's reply names the last sequence the control
 * plane stored for this lease; the writer drops everything up to it and
 * sends the rest. That covers a request cut by the byte or time bound, and a
 * reply lost on the way (the resent lines are refused as repeats, naming how
 * far the control plane got). A rejection that stored nothing new (lease
 * ended, bad data) is final: the stream fails with the control plane's
 * message. So is a 501: the control plane does not serve the stream.
 */
export function createStreamWriter(
  stream: "events" | "logs",
  options: StreamWriterOptions,
): StreamWriter {
  const path = `/v1/runner/${stream}`;
  let maxBytes = options.maxRequestBytes ?? 1_000_000;
  const timeoutMs = options.requestTimeoutMs ?? 20_000;
  const maxRetries = options.maxRetries ?? 8;
  const queue: Queued[] = [];
  let next = 1;
  let confirmed = 0;
  let failure: Error | undefined;
  let pumping: Promise<void> | undefined;
  let abandoned = false;
  let wake: (() => void) | undefined; // ends a backoff early when the stream is abandoned
  const prefix = JSON.stringify({
    apiVersion: "v1",
    runnerId: options.runnerId,
    jobId: options.jobId,
    leaseToken: options.leaseToken,
  }).slice(0, -1);

  const confirm = (upTo: number) => {
    confirmed = Math.max(confirmed, upTo);
    let done = 0;
    while (done < queue.length && queue[done]!.sequence <= confirmed) done++;
    queue.splice(0, done);
  };

  const pump = async () => {
    let retries = 0;
    while (queue.length > 0) {
      const batch: Queued[] = [];
      let bytes = 0;
      for (const q of queue) {
        if (batch.length > 0 && bytes + q.line.length + 1 > maxBytes) break;
        batch.push(q);
        bytes += q.line.length + 1;
      }
      const first = batch[0]!.sequence;
      let reply: NdjsonReply;
      try {
        reply = await options.post(path, `${batch.map((b) => b.line).join("\n")}\n`, timeoutMs);
      } catch (err) {
        if (retries++ >= maxRetries)
          throw new Error(
            `${stream}: no reply from the control plane after ${retries} tries: ${(err as Error).message}`,
            { cause: err },
          );
        await backoff(retries);
        continue; // resent as it was: what got stored is refused as a repeat, naming how far it got
      }
      if (reply.status >= 200 && reply.status < 300) {
        confirm(batch[batch.length - 1]!.sequence);
        retries = 0;
        continue;
      }
      const header = reply.headers[lastAcceptedHeader];
      const last = typeof header === "string" && /^\d+$/.test(header) ? Number(header) : undefined;
      if (last !== undefined) confirm(last);
      const progressed = last !== undefined && last >= first;
      if (reply.status === 413) {
        // The control plane's bound is smaller than ours: from now on send what it just took (or
        // half).
        const taken = progressed
          ? batch.filter((b) => b.sequence <= last).reduce((sum, b) => sum + b.line.length + 1, 0)
          : Math.floor(bytes / 2);
        maxBytes = Math.max(1, Math.min(maxBytes, taken));
        if (!progressed && batch.length === 1) throw refused(first, reply);
        continue;
      }
      if (progressed) {
        retries = 0;
        continue; // the control plane stored part of this request: send the rest
      }
      if (
        (reply.status === 429 || (reply.status >= 500 && reply.status !== 501)) &&
        retries++ < maxRetries
      ) {
        await backoff(retries);
        continue;
      }
      throw refused(first, reply);
    }
  };

  const refused = (first: number, reply: NdjsonReply) =>
    new StreamRefused(
      `${stream}: the control plane refused sequence ${first}: ${reply.status} ${messageOf(reply.text)}`,
      reply.status,
    );

  const backoff = (attempt: number) =>
    new Promise<void>((resolve) => {
      if (abandoned) return resolve();
      const timer = setTimeout(
        resolve,
        Math.min(5_000, (options.backoffMs ?? 100) * 2 ** (attempt - 1)),
      );
      wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });

  const start = () => {
    // The first request waits for the current tick to end, so a burst of writes shares it.
    pumping ??= new Promise((resolve) => setImmediate(resolve))
      .then(pump)
      .catch((err: Error) => {
        if (failure) return; // abandoned meanwhile
        failure = err;
        queue.length = 0;
        options.onFailure?.(err);
      })
      .finally(() => {
        pumping = undefined;
        if (queue.length > 0 && !failure) start(); // written while the last request was ending
      });
  };

  return {
    write(data) {
      if (failure) throw failure;
      const sequence = next;
      const line = `${prefix},"sequence":${sequence},"data":${JSON.stringify(data)}}`;
      if (Buffer.byteLength(line) + 1 > maxBytes)
        throw new Error(
          `${stream}: one message of ${Buffer.byteLength(line)} bytes is over the ` +
            `request bound of ${maxBytes} bytes; split it`,
        );
      next++;
      queue.push({ sequence, line });
      if (queue.length > (options.maxQueuedLines ?? Infinity)) {
        // confirmations go by sequence, so a dropped line still in flight is harmless
        queue.shift();
        options.onDropped?.();
      }
      start();
      return sequence;
    },
    async flush() {
      while (pumping) await pumping;
      if (failure) throw failure;
    },
    get confirmed() {
      return confirmed;
    },
    get failure() {
      return failure;
    },
    get queued() {
      return queue.length;
    },
    abandon() {
      abandoned = true;
      failure ??= new Error(`${stream}: abandoned (the lease is gone)`);
      queue.length = 0;
      wake?.();
    },
  };
}

function messageOf(text: string): string {
  try {
    return (JSON.parse(text) as { message?: string }).message ?? text;
  } catch {
    return text;
  }
}
