import type { JsonValue } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";

/**
 * Parses one JSON object (a request body, an NDJSON line); anything else is
 * invalid_argument naming `what` ("the request body", "line 3").
 */
export function parseJsonObject(text: string, what: string): Record<string, JsonValue> {
  let json: JsonValue;
  try {
    json = JSON.parse(text) as JsonValue;
  } catch (err) {
    throw new ConnectError(
      `${what} is not valid JSON: ${jsonSyntaxReason(err)}`,
      Code.InvalidArgument,
    );
  }
  if (json === null || typeof json !== "object" || Array.isArray(json)) {
    throw new ConnectError(`${what} must be a JSON object`, Code.InvalidArgument);
  }
  return json;
}

/**
 * JSON.parse's reason without the excerpt of the input V8 quotes in it, which could hold a lease
 * token.
 */
function jsonSyntaxReason(err: unknown): string {
  return (err as Error).message.replace(/,\s*(?:\.\.\.)?".*"(?:\.\.\.)? is not valid JSON$/s, "");
}
