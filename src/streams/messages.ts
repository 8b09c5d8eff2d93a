import { Code, ConnectError } from "@connectrpc/connect";
import type { JsonValue } from "@bufbuild/protobuf";
import { checkJobId, checkLeaseToken } from "../broker/ids.js";
import type { StreamName } from "../store/schema.js";

/** Highest sequence accepted: 2^53 - 1, so sequences are exact JSON numbers everywhere. */
const maxSequence = Number.MAX_SAFE_INTEGER;

/** One stream message as a transport decoded it, before the stream rules. */
export interface IncomingMessage {
  /** Where it was in the request, for errors: "line 3" (NDJSON) or "message 3". */
  readonly where: string;
  readonly jobId: string;
  readonly leaseToken: string;
  readonly sequence: bigint;
  /** The message's data; undefined when the message had none. */
  readonly data: JsonValue | undefined;
  /**
   * A rule the transport already found broken (wrong apiVersion, another
   * runner's runnerId). The message is rejected at its turn, after every
   * message before it is stored, naming the last accepted sequence.
   */
  readonly refusal?: ConnectError;
}

/** A message that passed the per-message rules, ready to append. */
export interface CheckedMessage {
  readonly where: string;
  readonly jobId: string;
  readonly leaseToken: string;
  readonly tokenHash: Buffer;
  readonly sequence: number;
  /** `data` as JSON text, as it is stored. */
  readonly dataJson: string;
}

/** The lease a message names, when its jobId and token have the right shape. */
export interface MessageLease {
  readonly jobId: string;
  readonly leaseToken: string;
  readonly tokenHash: Buffer;
}

/**
 * Applies the rules of one message that need no database, after its lease
 * (see messageLease): a sequence in 1..2^53-1, and data of the stream's shape
 * (logs: a text chunk or {stream, text}; events: an object with a "type").
 */
export function checkMessage(
  stream: StreamName,
  m: IncomingMessage,
  lease: MessageLease,
): CheckedMessage {
  if (m.sequence <= 0n)
    throw invalid(
      m,
      "sequence is required: a positive integer that increases with each message of this lease and stream",
    );
  if (m.sequence > maxSequenceBig)
    throw invalid(m, `sequence ${m.sequence} is over the largest accepted, ${maxSequence}`);
  const data = m.data;
  if (data === undefined || data === null) throw invalid(m, `data is required: ${shapeOf(stream)}`);
  const shapeError = stream === "logs" ? logShapeError(data) : eventShapeError(data);
  if (shapeError) throw invalid(m, `${shapeError}; ${shapeOf(stream)}`);
  return {
    where: m.where,
    jobId: lease.jobId,
    leaseToken: lease.leaseToken,
    tokenHash: lease.tokenHash,
    sequence: Number(m.sequence),
    dataJson: JSON.stringify(data),
  };
}

const maxSequenceBig = BigInt(maxSequence);

function invalid(m: IncomingMessage, text: string): ConnectError {
  return new ConnectError(`${m.where}: ${text}`, Code.InvalidArgument);
}

/**
 * The lease a message names; throws invalid_argument (naming where) when
 * jobId or leaseToken is missing or malformed. `previous` is the lease of the
 * message before, whose token hash is reused when the token repeats (it
 * almost always does).
 */
export function messageLease(
  m: Pick<IncomingMessage, "where" | "jobId" | "leaseToken">,
  previous?: MessageLease,
): MessageLease {
  if (previous && previous.jobId === m.jobId && previous.leaseToken === m.leaseToken)
    return previous;
  try {
    const jobId = previous && previous.jobId === m.jobId ? previous.jobId : checkJobId(m.jobId);
    const tokenHash =
      previous && previous.leaseToken === m.leaseToken
        ? previous.tokenHash
        : checkLeaseToken(m.leaseToken);
    return { jobId, leaseToken: m.leaseToken, tokenHash };
  } catch (err) {
    if (err instanceof ConnectError)
      throw new ConnectError(`${m.where}: ${err.rawMessage}`, err.code);
    throw err;
  }
}

function shapeOf(stream: StreamName): string {
  return stream === "logs"
    ? 'a log message\'s data is a text chunk or {"stream": "stdout"|"stderr", "text": "..."}'
    : 'an event\'s data is an object with a "type", e.g. {"type": "job.started"}';
}

function logShapeError(data: JsonValue): string | undefined {
  if (typeof data === "string") return undefined;
  if (typeof data !== "object" || data === null || Array.isArray(data))
    return "data is neither a string nor an object";
  if (typeof data["text"] !== "string") return 'data has no string "text"';
  if (data["stream"] !== undefined && data["stream"] !== "stdout" && data["stream"] !== "stderr")
    return `data's "stream" is ${JSON.stringify(data["stream"]).slice(0, 40)}, not "stdout" or "stderr"`;
  return undefined;
}

function eventShapeError(data: JsonValue): string | undefined {
  if (typeof data !== "object" || data === null || Array.isArray(data))
    return "data is not an object";
  if (typeof data["type"] !== "string" || data["type"] === "") return 'data has no "type" string';
  return undefined;
}
