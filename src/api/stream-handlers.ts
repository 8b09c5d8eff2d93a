import type { DescMessage } from "@bufbuild/protobuf";
import { decodeJson, encodeJson } from "../protocol/json/codec.js";
import { timestampFromDate, ValueSchema, type Value } from "@bufbuild/protobuf/wkt";
import { ConnectError, type HandlerContext } from "@connectrpc/connect";
import type { StreamName } from "../store/schema.js";
import type { IncomingMessage } from "../streams/messages.js";
import type { StreamEntry, StreamQuery } from "../streams/read.js";
import type { Streams } from "../streams/streams.js";
import { runnerOf } from "./context.js";
import { checkRequestMessage } from "./request-rules.js";
import { transportFacts } from "../protocol/transport-facts.js";

/** The fields every stream message (EventsRequest, LogsRequest) has. */
interface StreamRequest {
  readonly apiVersion: string;
  readonly runnerId: string;
  readonly jobId: string;
  readonly leaseToken: string;
  readonly sequence: bigint;
  readonly data?: Value;
}

/**
 * Serves Events or Logs: hands the streamed requests to the domain as they
 * arrive. The guard checks streamed messages only here, one by one: a message
 * breaking a request rule (apiVersion, runnerId) is passed on with its
 * refusal, so the domain rejects it at its turn, after storing everything
 * before it.
 */
export async function ingestRequests(
  streams: Streams,
  stream: StreamName,
  schema: DescMessage,
  requests: AsyncIterable<StreamRequest>,
  ctx: HandlerContext,
): Promise<Record<string, never>> {
  const runner = runnerOf(ctx);
  await streams.ingest(stream, runner, requests, reader(schema, runner));
  return {};
}

/**
 * Reads each streamed request as an IncomingMessage, numbering them ("message 3", or its NDJSON
 * line).
 */
function reader(
  schema: DescMessage,
  runner: ReturnType<typeof runnerOf>,
): (req: StreamRequest) => IncomingMessage {
  let n = 0;
  return (req) => {
    n++;
    const { line, plainValues } = transportFacts(req);
    let refusal: ConnectError | undefined;
    try {
      checkRequestMessage(schema, req, runner);
    } catch (err) {
      if (!(err instanceof ConnectError)) throw err;
      refusal = err;
    }
    const message: IncomingMessage = {
      where: line === undefined ? `message ${n}` : `line ${line}`,
      jobId: req.jobId,
      leaseToken: req.leaseToken,
      sequence: req.sequence,
      // Lines the REST flat decoder read keep their data as the JSON sent: no Value is built.
      data:
        plainValues?.["data"] ??
        (req.data === undefined ? undefined : encodeJson(ValueSchema, req.data)),
    };
    return refusal ? { ...message, refusal } : message;
  };
}

/** The fields of GetJobLogsRequest and GetJobEventsRequest. */
interface EntriesRequest {
  readonly jobId: string;
  readonly after: string;
  readonly attempt: number;
  readonly fromSequence: bigint;
  readonly pageSize: number;
  readonly follow: boolean;
}

/** One entry as GetJobLogsResponse / GetJobEventsResponse. */
export interface EntryMessage {
  sequence: bigint;
  attempt: number;
  data: Value;
  position: string;
  receivedAt: ReturnType<typeof timestampFromDate>;
}

/**
 * Serves GetJobLogs or GetJobEvents: one page, or with follow every entry until the job settles.
 */
export async function* streamEntries(
  streams: Streams,
  stream: StreamName,
  req: EntriesRequest,
  ctx: HandlerContext,
): AsyncGenerator<EntryMessage> {
  const query: StreamQuery = {
    jobId: req.jobId,
    stream,
    after: req.after,
    attempt: req.attempt,
    fromSequence: Number(req.fromSequence),
    pageSize: req.pageSize,
  };
  const entries = req.follow ? streams.follow(query, ctx.signal) : streams.read(query);
  for await (const entry of entries) yield entryMessage(entry);
}

function entryMessage(e: StreamEntry): EntryMessage {
  return {
    sequence: BigInt(e.sequence),
    attempt: e.attempt,
    data: decodeJson(ValueSchema, e.data),
    position: e.position,
    receivedAt: timestampFromDate(e.receivedAt),
  };
}
