import type { JsonValue } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { jsonText } from "../../protocol/json/wire.js";
import { parseJsonObject } from "./json-text.js";

/**
 * A JSON request body, gathered up to `maxBytes` (resource_exhausted past
 * it, as soon as the bound is crossed). An empty body is the empty object.
 */
export async function readJsonBody(
  chunks: AsyncIterable<Buffer>,
  maxBytes: number,
): Promise<Record<string, JsonValue>> {
  const gathered: Buffer[] = [];
  let size = 0;
  for await (const chunk of chunks) {
    size += chunk.length;
    if (size > maxBytes)
      throw new ConnectError(
        `the request body is over ${maxBytes} bytes; send a smaller body`,
        Code.ResourceExhausted,
      );
    gathered.push(chunk);
  }
  const text = jsonText(Buffer.concat(gathered), "the request body");
  if (text.trim() === "") return {};
  return parseJsonObject(text, "the request body");
}
