import type { JsonValue } from "@bufbuild/protobuf";
import type { RunnerClient } from "../transport/client.js";
import type { JobOutput, OutputSink } from "./output.js";
import { createStreamWriter, StreamRefused, type StreamWriter } from "./stream-writer.js";

/** Options of the control-plane output sink. */
export interface ControlPlaneOutputOptions {
  /** The agent's operator log. */
  readonly warn: (message: string) => void;
  /** Longest flush() waits for delivery before giving up; 10 s by default. */
  readonly flushTimeoutMs?: number;
  /**
   * Most lines held per stream while the control plane is unreachable; older ones are dropped.
   * 10,000 by default.
   */
  readonly maxPending?: number;
  /**
   * First retry backoff of a request that got no reply (the stream writer's; 100 ms by default).
   */
  readonly backoffMs?: number;
}

const maxLineChars = 64 * 1024;

/**
 * Sends each lease's logs and events to POST /v1/runner/logs and
 * /v1/runner/events through one stream writer per stream (stream-writer.ts:
 * batched, one request in flight, resumed from the
 * forelead-last-accepted-sequence header). For an agent, a job's output never
 * fails the job: a 501 (the control plane does not store that stream) is
 * warned about once and the job runs on; any other refusal (the lease is
 * gone) is warned about once per lease and stops that stream. Lost replies
 * are retried until the lease ends, since the control plane may be
 * restarting; flush() bounds how long completion waits for them.
 */
export function createControlPlaneOutput(
  client: Pick<RunnerClient, "runnerId" | "postNdjson">,
  options: ControlPlaneOutputOptions,
): OutputSink {
  const warned = new Set<string>();
  const warnOnce = (key: string, message: string) => {
    if (warned.has(key)) return;
    warned.add(key);
    options.warn(message);
  };
  const flushTimeoutMs = options.flushTimeoutMs ?? 10_000;
  return {
    open(lease) {
      const { jobId } = lease;
      const open = (name: "logs" | "events"): StreamWriter =>
        createStreamWriter(name, {
          post: client.postNdjson,
          runnerId: client.runnerId,
          jobId,
          leaseToken: lease.leaseToken,
          maxRetries: Infinity,
          backoffMs: options.backoffMs,
          maxQueuedLines: options.maxPending ?? 10_000,
          onDropped: () =>
            warnOnce(
              `${name}:overflow:${jobId}`,
              `job ${jobId}: over ${options.maxPending ?? 10_000} ${name} waiting for ` +
                `the control plane; dropping the oldest`,
            ),
          onFailure: (err) => {
            if (err instanceof StreamRefused && err.status === 501) {
              warnOnce(
                `${name}:501`,
                `the control plane does not store job ${name} yet (501 on ` +
                  `/v1/runner/${name}); jobs keep running, their ${name} are not kept`,
              );
            } else {
              warnOnce(
                `${name}:${jobId}`,
                `job ${jobId}: ${name} not accepted, stopping them for this lease: ${err.message}`,
              );
            }
          },
        });
      const streams = { logs: open("logs"), events: open("events") };
      const write = (name: keyof typeof streams, data: JsonValue) => {
        const writer = streams[name];
        if (writer.failure) return; // warned about when it failed
        try {
          writer.write(data);
        } catch (err) {
          warnOnce(
            `${name}:bound:${jobId}`,
            `job ${jobId}: a line of ${name} left out: ${(err as Error).message}`,
          );
        }
      };
      const flush = async (name: keyof typeof streams) => {
        const writer = streams[name];
        let timer: NodeJS.Timeout | undefined;
        const late = new Promise<"late">(
          (resolve) => (timer = setTimeout(() => resolve("late"), flushTimeoutMs)),
        );
        const outcome = await Promise.race([writer.flush().catch(() => undefined), late]);
        clearTimeout(timer);
        if (outcome !== "late") return;
        warnOnce(
          `${name}:flush:${jobId}`,
          `job ${jobId}: ${writer.queued} ${name} not delivered within ${flushTimeoutMs} ms; completing without them`,
        );
        writer.abandon();
      };
      const output: JobOutput = {
        log: (line) =>
          write("logs", {
            stream: line.stream,
            text:
              line.text.length > maxLineChars ? `${line.text.slice(0, maxLineChars)}…` : line.text,
          }),
        event: (event) => write("events", event as JsonValue),
        flush: async () => {
          await Promise.all([flush("logs"), flush("events")]);
        },
        abandon: () => {
          streams.logs.abandon();
          streams.events.abandon();
        },
      };
      return output;
    },
  };
}
