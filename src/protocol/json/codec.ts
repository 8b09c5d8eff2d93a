import {
  fromJson,
  type DescMessage,
  type JsonValue,
  type Message,
  type MessageShape,
} from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { attachTransportFacts } from "../transport-facts.js";
import { fastFromJson, messageToJson } from "./compiled.js";
import { flatDecoder } from "./flat.js";

/**
 * proto3 JSON, both ways, for every surface that speaks it: REST bodies, replies and NDJSON lines,
 * the Job of every view and lease, and the runner agent's replies. One decode and one encode;
 * which reader or writer does the work is chosen here.
 *
 * The guarantee: the result is protobuf-es's own, byte for byte (`toJson` with default options,
 * `fromJson` with `ignoreUnknownFields`), and a refusal is the one protobuf-es words. Faster paths
 * take only what they are sure of and hand anything else to protobuf-es whole:
 * - compiled.ts, a reader and a writer generated once per message type (no reflection);
 * - flat.ts, for a streamed line of a flat message type: reads the parsed JSON directly and checks
 *   the text rules on the way (transport facts `textChecked`, `plainValues`).
 * Why they exist, with figures: docs/performance.md, "proto3 JSON without reflection".
 */

/** How `decodeJson` names its input and where it came from. */
export interface DecodeOptions {
  /**
   * Names the input in a refusal ("request body", "line 3"): a wrong type is then
   * invalid_argument naming the field by its JSON name. Without it, protobuf-es's own error.
   */
  readonly what?: string;
  /** The NDJSON line this message is, counted from 1: recorded as its transport fact `line`. */
  readonly line?: number;
}

/** Decodes proto3 JSON into a message of `schema`, ignoring unknown fields. */
export function decodeJson<T extends DescMessage>(
  schema: T,
  json: JsonValue,
  options: DecodeOptions = {},
): MessageShape<T> {
  const { what, line } = options;
  if (line === undefined) return decodeWhole(schema, json, what);
  const message =
    (flatDecoder(schema)?.(json as Record<string, JsonValue>) as MessageShape<T> | undefined) ??
    decodeWhole(schema, json, what);
  attachTransportFacts(message as Message, { line });
  return message;
}

/** proto3 JSON of `message`, as protobuf-es's `toJson` with default options writes it. */
export function encodeJson<T extends DescMessage>(schema: T, message: MessageShape<T>): JsonValue {
  return messageToJson(schema, message);
}

function decodeWhole<T extends DescMessage>(
  schema: T,
  json: JsonValue,
  what: string | undefined,
): MessageShape<T> {
  const fast = fastFromJson(schema, json);
  if (fast) return fast;
  if (what === undefined) return fromJson(schema, json, { ignoreUnknownFields: true });
  try {
    return fromJson(schema, json, { ignoreUnknownFields: true });
  } catch (err) {
    const text = (err as Error).message.replace(
      /^cannot decode (field|message) [\w.]+?\.(\w+) from JSON: /,
      (_m, kind, name) => (kind === "field" ? `field "${jsonNameOf(schema, name)}": ` : ""),
    );
    throw new ConnectError(`${what}: ${text}`, Code.InvalidArgument);
  }
}

function jsonNameOf(schema: DescMessage, protoName: string): string {
  return schema.fields.find((f) => f.name === protoName)?.jsonName ?? protoName;
}
