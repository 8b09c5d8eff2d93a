import { fromJson, type DescMessage, type JsonValue, type MessageShape } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { fastFromJson } from "../../protocol/json-codec.js";

/**
 * Decodes proto3 JSON, ignoring unknown fields; a wrong type is
 * invalid_argument naming the field by its JSON name (protobuf-es names it
 * by its proto name), after `what` ("request body", "line 3"). A body the
 * compiled plan is sure of skips reflection (json-codec.ts).
 */
export function decode<T extends DescMessage>(
  schema: T,
  json: JsonValue,
  what: string,
): MessageShape<T> {
  const fast = fastFromJson(schema, json);
  if (fast) return fast;
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
