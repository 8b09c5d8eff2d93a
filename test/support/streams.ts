import { expireLeaseNow } from "../../src/broker/leases/expire.js";
import {
  createStreamWriter,
  type StreamWriter,
  type StreamWriterOptions,
} from "../../src/runner/output/stream-writer.js";
import { expect } from "vitest";
import type { AdminActor } from "./actors.js";
import type { TestControlPlane } from "./control-plane.js";

/** Log chunks "line <from>\n" .. "line <to>\n". */
export function logLines(from: number, to: number): string[] {
  return Array.from({ length: to - from + 1 }, (_, i) => `line ${from + i}\n`);
}

/** One entry as GET /v1/admin/jobs/{jobId}/logs writes it. */
export interface EntryJson {
  readonly sequence: string;
  readonly attempt: number;
  readonly data: unknown;
  readonly position: string;
  readonly receivedAt: string;
}

/** A job's stream as the admin reads it over REST (NDJSON). */
export async function readEntries(
  admin: AdminActor,
  jobId: string,
  stream: "logs" | "events" = "logs",
  query = "",
): Promise<EntryJson[]> {
  const reply = await admin.rest.request("GET", `/v1/admin/jobs/${jobId}/${stream}${query}`);
  expect(reply.status, reply.text).toBe(200);
  expect(reply.headers["content-type"]).toBe("application/x-ndjson");
  return reply.text
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l) as EntryJson);
}

/** The sequences of a job's stream, in read order. */
export async function readSequences(
  admin: AdminActor,
  jobId: string,
  stream: "logs" | "events" = "logs",
): Promise<number[]> {
  return (await readEntries(admin, jobId, stream, "?pageSize=10000")).map((e) =>
    Number(e.sequence),
  );
}

/** Makes the job's live lease expire now, as if its time ran out (the sweep has not run yet). */
export async function expireLease(cp: TestControlPlane, jobId: string): Promise<void> {
  if (!(await expireLeaseNow(cp.plane.store.db, jobId)))
    throw new Error(`job ${jobId} holds no live lease to expire`);
}

/** The two streams of one lease: separate requests, running at once on the same connection. */
export interface LeaseStreams {
  readonly events: StreamWriter;
  readonly logs: StreamWriter;
  flush(): Promise<void>;
}

/**
 * Writers for a lease's events and logs, sharing `post` (one HTTP/2 connection): the two the
 * runner's control-plane output opens for each lease (runner/output/control-plane-output.ts),
 * without its warnings and bounds, so a test can drive and read each writer.
 */
export function createLeaseStreams(options: StreamWriterOptions): LeaseStreams {
  const events = createStreamWriter("events", options);
  const logs = createStreamWriter("logs", options);
  return {
    events,
    logs,
    flush: async () => void (await Promise.all([events.flush(), logs.flush()])),
  };
}
