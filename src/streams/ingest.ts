import { Code, ConnectError } from "@connectrpc/connect";
import type { Kysely } from "kysely";
import { leaseRefusal, type LeaseHolder } from "../broker/leases/check.js";
import type { Database, StreamName } from "../store/schema.js";
import { lastAcceptedSequence, type Appender } from "./append.js";
import { batchesOf } from "./batches.js";
import {
  checkMessage,
  messageLease,
  type CheckedMessage,
  type IncomingMessage,
  type MessageLease,
} from "./messages.js";

/**
 * The response header (and Connect error metadata) that carries the last accepted sequence of a
 * rejected request.
 */
const lastAcceptedHeader = "forelead-last-accepted-sequence";

/** Bounds of one ingest request. */
export interface IngestLimits {
  /** A request still open after this long is ended by the server (the protocol's bound is 25 s). */
  readonly maxRequestMs: number;
  /** Most bytes of data one request may carry (REST also bounds the whole body). */
  readonly maxRequestBytes: number;
  /** Most messages stored by one statement. */
  readonly maxBatchMessages: number;
}

const idleMark = Symbol("idle");
const deadlineMark = Symbol("deadline");

/**
 * Stores the messages of one request, in order, and resolves with how many
 * were accepted. Messages are checked as they arrive and stored in batches:
 * a batch is every message already received on the same lease, stored by one
 * statement as soon as reading on would have to wait for the network (or at
 * `maxBatchMessages`). So a request pays one commit per burst, not per line.
 * A transport that reads messages in batches (batches.ts: NDJSON, a body
 * chunk's lines) is read a batch at a time, so the wait checks are per
 * chunk, not per message.
 *
 * The first rejected message ends the request: every message before it is
 * stored first, then the error names the last accepted sequence for that
 * lease and stream, in its message and in the `forelead-last-accepted-sequence`
 * metadata, so the client resumes exactly after it. Errors thrown by
 * `messages` itself (a bad NDJSON line, a body over its bound) are handled
 * the same way. `read` turns each message of the transport into an
 * IncomingMessage as it is taken (a function, not a mapping generator: no
 * promise hop per message). `onStored` hears of every committed batch.
 */
export async function ingest<T>(
  db: Kysely<Database>,
  append: Appender,
  stream: StreamName,
  holder: LeaseHolder,
  messages: AsyncIterable<T>,
  read: (message: T) => IncomingMessage,
  limits: IngestLimits,
  onStored: (jobId: string) => void = () => {},
): Promise<number> {
  const it = batchesOf(messages);
  let expired = false;
  let deadlineTimer: NodeJS.Timeout | undefined;
  const deadline = new Promise<typeof deadlineMark>((resolve) => {
    deadlineTimer = setTimeout(() => {
      expired = true;
      resolve(deadlineMark);
    }, limits.maxRequestMs);
  });
  const final = new WeakSet<ConnectError>();
  let batch: CheckedMessage[] = [];
  let idle: Promise<typeof idleMark> | undefined;
  let current: MessageLease | undefined; // the lease of the last message read
  let accepted = 0;
  let bytes = 0;

  /** The error to end the request with: `err` plus the last accepted sequence of `lease`. */
  const rejection = async (
    err: ConnectError,
    lease: MessageLease | undefined,
  ): Promise<ConnectError> => {
    const last = lease
      ? await lastAcceptedSequence(db, holder, stream, lease.jobId, lease.tokenHash)
      : 0;
    const out = new ConnectError(
      `${err.rawMessage}; last accepted ${stream} sequence for this lease is ${last}`,
      err.code,
      err.metadata,
      undefined,
      err,
    );
    out.metadata.set(lastAcceptedHeader, String(last));
    final.add(out);
    return out;
  };

  const flush = async (): Promise<void> => {
    if (batch.length === 0) return;
    const items = batch;
    batch = [];
    idle = undefined;
    const head = items[0]!;
    const outcome = await append({
      holder,
      stream,
      jobId: head.jobId,
      tokenHash: head.tokenHash,
      sequences: items.map((m) => m.sequence),
      data: items.map((m) => m.dataJson),
    });
    if (outcome === "stored") {
      accepted += items.length;
      onStored(head.jobId);
      return;
    }
    const at = `${head.where} (sequence ${head.sequence})`;
    if (outcome === "lease_not_live") {
      const refusal = await leaseRefusal(db, holder, head.jobId, head.tokenHash);
      throw await rejection(new ConnectError(`${at}: ${refusal.rawMessage}`, refusal.code), head);
    }
    const last = await lastAcceptedSequence(db, holder, stream, head.jobId, head.tokenHash);
    throw await rejection(sequenceError(head, last), head);
  };

  try {
    for (;;) {
      // Errors of reading are mapped where they are awaited (bodyError), not by a .catch on every
      // message: that is a promise per line more.
      const next = it.next();
      let r: IteratorResult<readonly T[]> | typeof idleMark | typeof deadlineMark;
      try {
        r =
          batch.length > 0
            ? await Promise.race([next, (idle ??= nextMacrotask())])
            : await Promise.race([next, deadline]);
      } catch (err) {
        throw bodyError(err);
      }
      if (r === idleMark) {
        await flush(); // reading on would wait for the network: store what has arrived
        try {
          r = await Promise.race([next, deadline]);
        } catch (err) {
          throw bodyError(err);
        }
      }
      if (r === deadlineMark || expired) {
        next.catch(() => {}); // the request is abandoned; its body may still fail later
        const bound = `${limits.maxRequestMs / 1000} s`;
        throw new ConnectError(
          `the request stayed open past the server's bound of ${bound} (runners ` +
            `keep each request under 25 s); send the rest in a new request`,
          Code.DeadlineExceeded,
        );
      }
      if (r.done) break;
      for (const value of r.value) {
        const m = read(value);
        if (m.refusal) {
          current = leaseOrUndefined(m, current) ?? current;
          throw new ConnectError(
            `${m.where} (sequence ${m.sequence}): ${m.refusal.rawMessage}`,
            m.refusal.code,
            m.refusal.metadata,
          );
        }
        current = messageLease(m, current);
        const checked = checkMessage(stream, m, current);
        bytes += Buffer.byteLength(checked.dataJson);
        if (bytes > limits.maxRequestBytes) {
          throw new ConnectError(
            `${m.where} takes the request over ${limits.maxRequestBytes} bytes of data; send it in a new request`,
            Code.ResourceExhausted,
          );
        }
        const tail = batch[batch.length - 1];
        if (tail && (tail.jobId !== checked.jobId || tail.leaseToken !== checked.leaseToken))
          await flush();
        else if (tail && checked.sequence <= tail.sequence)
          throw sequenceError(checked, tail.sequence);
        batch.push(checked);
        if (batch.length >= limits.maxBatchMessages) await flush();
      }
    }
    await flush();
    return accepted;
  } catch (thrown) {
    // Not a rule: a database failure, say. The client retries; the stored prefix shows then.
    if (!(thrown instanceof ConnectError) || final.has(thrown)) throw thrown;
    // everything before the rejected message is stored (or this throws the earlier rejection)
    await flush();
    throw await rejection(thrown, current);
  } finally {
    clearTimeout(deadlineTimer);
  }
}

/**
 * A failure of reading the messages: a bad line or a body over its bound as it is, anything else a
 * body that ended early.
 */
function bodyError(err: unknown): ConnectError {
  if (err instanceof ConnectError) return err;
  return new ConnectError(
    `the request body ended early: ${(err as Error)?.message ?? String(err)}`,
    Code.Canceled,
    undefined,
    undefined,
    err,
  );
}

function sequenceError(m: CheckedMessage, last: number): ConnectError {
  const what = m.sequence === last ? "repeats" : `is not above the last accepted one`;
  return new ConnectError(`sequence ${m.sequence} ${what} (${m.where})`, Code.Aborted);
}

function leaseOrUndefined(
  m: IncomingMessage,
  previous: MessageLease | undefined,
): MessageLease | undefined {
  try {
    return messageLease(m, previous);
  } catch {
    return undefined;
  }
}

function nextMacrotask(): Promise<typeof idleMark> {
  return new Promise((resolve) => setImmediate(resolve, idleMark));
}
