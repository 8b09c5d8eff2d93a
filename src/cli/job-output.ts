import { toJson, toJsonString, type JsonValue } from "@bufbuild/protobuf";
import { timestampDate, ValueSchema } from "@bufbuild/protobuf/wkt";
import type { Client } from "@connectrpc/connect";
import {
  GetJobEventsResponseSchema,
  GetJobLogsResponseSchema,
  type AdminService,
  type GetJobEventsResponse,
  type GetJobLogsResponse,
} from "../../gen/forelead/admin/v1/admin_pb.js";
import { logEntryText } from "../protocol/log-text.js";
import { followResuming } from "./follow.js";

/** Which of a job's streams: its log or its events. */
export type JobStream = "logs" | "events";

/**
 * One entry of either stream (GetJobLogsResponse and GetJobEventsResponse have the same fields).
 */
type Entry = GetJobLogsResponse | GetJobEventsResponse;

/** How to read a job's stream. */
export interface JobStreamOptions {
  readonly jobId: string;
  /** Only this attempt; 0 for all. */
  readonly attempt?: number;
  /**
   * Keep reading until the job settles, resuming after a dropped connection from the last entry
   * handed on.
   */
  readonly follow: boolean;
  readonly warn: (text: string) => void;
  /** Stops a follow: the read ends (without error) when it is aborted. */
  readonly signal?: AbortSignal;
}

const pageSize = 1000;

/**
 * Reads a job's log or events in order, handing each entry to `onEntry`
 * exactly once: without follow every page; with follow until the job settles,
 * across dropped connections and control-plane restarts (the request is
 * made again with after = the last entry's position).
 */
export async function readJobStream(
  admin: Client<typeof AdminService>,
  stream: JobStream,
  options: JobStreamOptions,
  onEntry: (entry: Entry) => void,
): Promise<void> {
  const request = (after: string) => ({
    jobId: options.jobId,
    attempt: options.attempt ?? 0,
    after,
    follow: options.follow,
    pageSize: options.follow ? 0 : pageSize,
  });
  const open = (after: string): AsyncIterable<Entry> =>
    stream === "logs"
      ? admin.getJobLogs(request(after), { signal: options.signal })
      : admin.getJobEvents(request(after), { signal: options.signal });
  if (!options.follow) {
    let after = "";
    for (let n = pageSize; n === pageSize;) {
      n = 0;
      for await (const entry of open(after)) {
        n++;
        after = entry.position;
        onEntry(entry);
      }
    }
    return;
  }
  await followResuming({
    start: "",
    open,
    cursorOf: (e) => e.position,
    onItem: onEntry,
    onEnd: "done",
    describe: (position) =>
      position ? `resuming after position ${position}` : "resuming from the start",
    name: `${stream} of job ${options.jobId}`,
    warn: options.warn,
    signal: options.signal,
  });
}

/**
 * An entry as `forelead jobs logs|events` prints it: the log's plain text, an event as a line, or
 * proto3 JSON.
 */
export function formatEntry(stream: JobStream, entry: Entry, json: boolean): string {
  if (json)
    return `${entry.$typeName === "forelead.admin.v1.GetJobLogsResponse" ? toJsonString(GetJobLogsResponseSchema, entry) : toJsonString(GetJobEventsResponseSchema, entry)}\n`;
  const data = entry.data ? (toJson(ValueSchema, entry.data) as JsonValue) : null;
  if (stream === "logs") return logEntryText(data);
  const type =
    data && typeof data === "object" && !Array.isArray(data) && typeof data["type"] === "string"
      ? data["type"]
      : "-";
  return (
    `attempt ${entry.attempt}  #${entry.sequence}  ` +
    `${entry.receivedAt ? timestampDate(entry.receivedAt).toISOString() : "-"}  ` +
    `${type}  ${JSON.stringify(data)}\n`
  );
}
