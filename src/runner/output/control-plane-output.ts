import type { RunnerClient } from "../transport/client.js";
import { RunnerApiError } from "../transport/client.js";
import type { JobOutput, OutputLease, OutputSink } from "./output.js";
import { TransportError } from "../transport/rest-transport.js";

/** Options of the control-plane output sink. */
export interface HttpOutputOptions {
  /** The agent's operator log. */
  readonly warn: (message: string) => void;
  /** Longest flush() waits for delivery before giving up; 10 s by default. */
  readonly flushTimeoutMs?: number;
  /** Most lines held per stream while the control plane is unreachable; older ones are dropped. 10,000 by default. */
  readonly maxPending?: number;
}

const maxBatchLines = 500;
const maxBatchBytes = 512 * 1024; // half the control plane's 1 MiB request bound
const maxLineChars = 64 * 1024;

/**
 * Sends a lease's logs and events as NDJSON to POST /v1/runner/logs and
 * /v1/runner/events, each stream with its own increasing sequence, one
 * request in flight per stream. A 501 means the control plane does not store
 * that stream yet: warned once, and the job runs on. A 404/409 means the lease
 * is gone (or a sequence was refused): the stream stops. Transport errors and
 * 5xx are retried with the same sequences.
 */
export function createHttpOutput(client: RunnerClient, options: HttpOutputOptions): OutputSink {
  const warned = new Set<string>();
  const warnOnce = (key: string, message: string) => {
    if (warned.has(key)) return;
    warned.add(key);
    options.warn(message);
  };
  return {
    open(lease) {
      const logs = createStream(client, lease, "/v1/runner/logs", "logs", options, warnOnce);
      const events = createStream(client, lease, "/v1/runner/events", "events", options, warnOnce);
      const output: JobOutput = {
        log: (line) => logs.push(line.text.length > maxLineChars ? { stream: line.stream, text: `${line.text.slice(0, maxLineChars)}…` } : line),
        event: (event) => events.push(event),
        flush: async () => {
          await Promise.all([logs.flush(), events.flush()]);
        },
        abandon: () => {
          logs.stop();
          events.stop();
        },
      };
      return output;
    },
  };
}

interface Stream {
  push(data: unknown): void;
  flush(): Promise<void>;
  stop(): void;
}

function createStream(
  client: RunnerClient,
  lease: OutputLease,
  path: string,
  name: string,
  options: HttpOutputOptions,
  warnOnce: (key: string, message: string) => void,
): Stream {
  const pending: Array<{ sequence: number; line: string }> = [];
  const maxPending = options.maxPending ?? 10_000;
  let nextSequence = 1;
  let stopped = false;
  let sending: Promise<void> | undefined;
  let retryTimer: NodeJS.Timeout | undefined;
  let failures = 0;
  const idle: Array<() => void> = [];

  const settleIdle = () => {
    if (pending.length === 0 || stopped) idle.splice(0).forEach((resolve) => resolve());
  };
  const stop = () => {
    stopped = true;
    pending.length = 0;
    clearTimeout(retryTimer);
    settleIdle();
  };

  const sendBatch = async () => {
    let bytes = 0;
    const batch = [];
    for (const p of pending) {
      if (batch.length >= maxBatchLines || (batch.length > 0 && bytes + p.line.length > maxBatchBytes)) break;
      batch.push(p);
      bytes += p.line.length + 1;
    }
    try {
      const reply = await client.postNdjson(path, batch.map((b) => b.line));
      if (reply.status >= 200 && reply.status < 300) {
        pending.splice(0, batch.length);
        failures = 0;
        return;
      }
      const err = (reply.json ?? {}) as { code?: string; message?: string };
      if (reply.status === 501) {
        warnOnce(`${name}:501`, `the control plane does not store job ${name} yet (501 on ${path}); jobs keep running, their ${name} are not kept`);
        return stop();
      }
      throw new RunnerApiError(`POST ${path}`, reply.status, err.code ?? "unknown", err.message ?? reply.text.slice(0, 200));
    } catch (err) {
      if (err instanceof TransportError || (err instanceof RunnerApiError && err.transient)) {
        failures++;
        return; // retried by the pump with the same sequences
      }
      const accepted = lastAccepted(err);
      if (accepted !== undefined) {
        // The control plane told us where it stands: resume right after it.
        while (pending.length > 0 && pending[0]!.sequence <= accepted) pending.shift();
        if (pending.length > 0 && pending[0]!.sequence > accepted + 1) return stop();
        return;
      }
      warnOnce(`${name}:${lease.jobId}`, `job ${lease.jobId}: ${name} not accepted, stopping them for this lease: ${(err as Error).message}`);
      stop();
    }
  };

  const pump = () => {
    if (sending || stopped || pending.length === 0 || retryTimer) return;
    sending = sendBatch().finally(() => {
      sending = undefined;
      settleIdle();
      if (failures > 0 && pending.length > 0) {
        retryTimer = setTimeout(() => {
          retryTimer = undefined;
          pump();
        }, Math.min(5000, 200 * 2 ** Math.min(failures, 5)));
      } else {
        pump();
      }
    });
  };

  return {
    push(data) {
      if (stopped) return;
      const sequence = nextSequence++;
      pending.push({ sequence, line: JSON.stringify({ apiVersion: "v1", runnerId: client.runnerId, jobId: lease.jobId, leaseToken: lease.leaseToken, sequence, data }) });
      if (pending.length > maxPending) {
        pending.shift();
        warnOnce(`${name}:overflow:${lease.jobId}`, `job ${lease.jobId}: over ${maxPending} ${name} waiting for the control plane; dropping the oldest`);
      }
      queueMicrotask(pump);
    },
    flush() {
      if (pending.length === 0 || stopped) return Promise.resolve();
      return new Promise<void>((resolve) => {
        const timer = setTimeout(() => {
          warnOnce(`${name}:flush:${lease.jobId}`, `job ${lease.jobId}: ${pending.length} ${name} not delivered within ${options.flushTimeoutMs ?? 10_000} ms; completing without them`);
          stop();
        }, options.flushTimeoutMs ?? 10_000);
        idle.push(() => {
          clearTimeout(timer);
          resolve();
        });
        pump();
      });
    },
    stop,
  };
}

/** The last accepted sequence a stream refusal names, e.g. "last accepted events sequence for this lease is 3". */
function lastAccepted(err: unknown): number | undefined {
  if (!(err instanceof RunnerApiError) || err.status !== 409) return undefined;
  const m = /last accepted \w+ sequence[^0-9]*(\d+)/.exec(err.message);
  return m ? Number(m[1]) : undefined;
}
