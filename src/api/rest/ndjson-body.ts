import { StringDecoder } from "node:string_decoder";
import type { DescMessage, Message } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { parseJsonObject } from "./json-text.js";
import { decode } from "./proto-json.js";

const ndjsonLines = new WeakMap<object, number>();

/** The NDJSON line a request message was read from, when it came from the REST surface. */
export function ndjsonLineOf(message: object): number | undefined {
  return ndjsonLines.get(message);
}

/**
 * NDJSON request messages, read incrementally: never more than one line is
 * buffered. Lines are numbered from 1 (see ndjsonLineOf); blank lines are
 * skipped but counted. A line that takes the body past `maxBytes` (every
 * byte counts, newlines too) ends the stream with resource_exhausted; the
 * lines before it have already been handed to the handler.
 */
export async function* ndjsonMessages(chunks: AsyncIterable<Buffer>, schema: DescMessage, maxBytes: number): AsyncGenerator<Message> {
  const decoder = new StringDecoder("utf8");
  let pending = "";
  let consumed = 0;
  let lineNo = 0;
  const over = (n: number) => new ConnectError(`line ${n} takes the request body over ${maxBytes} bytes; send it in a new request`, Code.ResourceExhausted);
  // `raw` is the line as sent, with its newline when it had one.
  const parseLine = (raw: string): Message | undefined => {
    lineNo++;
    consumed += Buffer.byteLength(raw, "utf8");
    if (consumed > maxBytes) throw over(lineNo);
    const line = raw.replace(/\r?\n$/, "");
    if (line.trim() === "") return undefined;
    const message = decode(schema, parseJsonObject(line, `line ${lineNo}`), `line ${lineNo}`);
    ndjsonLines.set(message, lineNo);
    return message;
  };
  for await (const chunk of chunks) {
    pending += decoder.write(chunk);
    let nl: number;
    while ((nl = pending.indexOf("\n")) !== -1) {
      const message = parseLine(pending.slice(0, nl + 1));
      pending = pending.slice(nl + 1);
      if (message) yield message;
    }
    if (Buffer.byteLength(pending, "utf8") + consumed > maxBytes) throw over(lineNo + 1);
  }
  pending += decoder.end();
  if (pending.length > 0) {
    const message = parseLine(pending);
    if (message) yield message;
  }
}
