import { Code, ConnectError } from "@connectrpc/connect";
import type { Kysely } from "kysely";
import type { LeaseHolder } from "../broker/leases/check.js";
import type { Store } from "../store/database.js";
import type { Database, StreamName } from "../store/schema.js";
import { createAppender, defaultAppendBatching } from "./append.js";
import type { BatcherOptions } from "../broker/leases/batcher.js";
import { ingest, type IngestLimits } from "./ingest.js";
import type { IncomingMessage } from "./messages.js";
import { createStreamNotifier } from "./notifier.js";
import {
  checkQuery,
  isSettled,
  jobState,
  readPage,
  type StreamEntry,
  type StreamQuery,
} from "./read.js";
import { createStreamWakeups, type StreamWakeups } from "./wakeups.js";
import { jobSamples, type JobSamples } from "./samples.js";
import { sizing, type SizingGroup, type SizingQuery } from "./sizing.js";

/** Events and logs: ingest from runners, read and follow for internal services. */
export interface Streams {
  /** Stores one request's messages in order; resolves with how many were accepted (see ingest). */
  ingest<T>(
    stream: StreamName,
    holder: LeaseHolder,
    messages: AsyncIterable<T>,
    read: (message: T) => IncomingMessage,
  ): Promise<number>;
  /** One page of a job's stream, in order across attempts; 404 for an unknown job. */
  read(query: StreamQuery): AsyncIterable<StreamEntry>;
  /**
   * The job's stream from the query's position on, live, ending once the job
   * has settled and every entry was sent (or with unavailable when closed).
   */
  follow(query: StreamQuery, signal?: AbortSignal): AsyncIterable<StreamEntry>;
  /** A job's resource samples across its attempts, with their peaks; 404 for an unknown job. */
  samples(jobId: string): Promise<JobSamples>;
  /** Requested resources against the peaks jobs reached, per group of alike jobs. */
  sizing(query: SizingQuery): Promise<SizingGroup[]>;
  close(): Promise<void>;
}

/** Options of the streams. */
export interface StreamsOptions extends Partial<IngestLimits> {
  readonly store: Store;
  /**
   * How long a follower waits for a wakeup before it reads again anyway:
   * a safety net for a lost notification (say, a LISTEN connection that
   * dropped), not the way followers normally learn of new entries.
   */
  readonly followPollMs?: number;
  /** How the batches of requests on many leases share statements; see defaultAppendBatching. */
  readonly appendBatching?: BatcherOptions;
}

/** Defaults: a request is cut 30 s after it opened; 1 MiB of data; 5,000 messages per statement. */
const defaultIngestLimits: IngestLimits = {
  maxRequestMs: 30_000,
  maxRequestBytes: 1024 * 1024,
  maxBatchMessages: 5_000,
};

/** Starts the streams: subscribes to follower wakeups. */
export async function createStreams(options: StreamsOptions): Promise<Streams> {
  const { db } = options.store;
  const limits: IngestLimits = {
    maxRequestMs: options.maxRequestMs ?? defaultIngestLimits.maxRequestMs,
    maxRequestBytes: options.maxRequestBytes ?? defaultIngestLimits.maxRequestBytes,
    maxBatchMessages: options.maxBatchMessages ?? defaultIngestLimits.maxBatchMessages,
  };
  const wakeups = await createStreamWakeups(options.store);
  const notifier = createStreamNotifier(db);
  const append = createAppender(db, options.appendBatching ?? defaultAppendBatching);
  const followPollMs = options.followPollMs ?? 5_000;
  let closing: Promise<void> | undefined;
  return {
    samples: (jobId) => jobSamples(db, jobId),
    sizing: (query) => sizing(db, query),
    ingest: (stream, holder, messages, read) =>
      ingest(db, append, stream, holder, messages, read, limits, (jobId) =>
        notifier.stored(jobId, stream),
      ),
    async *read(query) {
      const q = checkQuery(query);
      await jobState(db, q.jobId);
      yield* await readPage(db, q);
    },
    follow: (query, signal) => follow(db, wakeups, query, followPollMs, signal),
    close() {
      // Once: the listener calls it to end followers before its sessions drain, the resource stack
      // again after.
      closing ??= (async () => {
        await notifier.close();
        await wakeups.close();
      })();
      return closing;
    },
  };
}

async function* follow(
  db: Kysely<Database>,
  wakeups: StreamWakeups,
  query: StreamQuery,
  pollMs: number,
  signal?: AbortSignal,
): AsyncGenerator<StreamEntry> {
  const q = checkQuery(query);
  let after = { lease: q.afterLease, sequence: q.afterSequence };
  for (;;) {
    // armed before reading: a message stored after the read still wakes us
    const waiter = wakeups.arm(q.jobId, q.stream);
    try {
      // The state is read before the entries: once settled, no message can be stored any more
      // (appends hold the job row until they commit), so the read below is the last one needed.
      const state = await jobState(db, q.jobId);
      for (;;) {
        const page = await readPage(db, q, after);
        for (const entry of page) {
          yield entry;
          after = { lease: entry.leaseId, sequence: entry.sequence };
        }
        if (page.length < q.limit) break;
      }
      if (isSettled(state) || signal?.aborted) return;
      await waiter.wait(pollMs, signal);
      if (signal?.aborted) return;
      if (wakeups.closed)
        throw new ConnectError(
          "the control plane is shutting down; follow again from the last position",
          Code.Unavailable,
        );
    } finally {
      waiter.cancel();
    }
  }
}
