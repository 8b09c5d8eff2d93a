import { isUtf8 } from "node:buffer";
import type { DescMessage, Message } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { decodeJson } from "../../protocol/json/codec.js";
import { jsonText, mayHoldUnsafeInteger } from "../../protocol/json/wire.js";
import { parseJsonObject } from "./json-text.js";
import { batchedMessages, type BatchedMessages } from "../../streams/batches.js";

const newline = 0x0a;
const carriageReturn = 0x0d;
const openBrace = 0x7b;

/**
 * NDJSON request messages, read incrementally: never more than one line is buffered past the body
 * chunk being read, and the lines each chunk ends are handed on as one batch (batches.ts). Lines
 * are numbered from 1 (the transport fact `line`); blank lines are skipped but counted. Lines are
 * split on their bytes and checked as bytes (jsonText: invalid UTF-8, integers past 2^53) before
 * they are decoded (protocol/json/codec.ts, which records each line number): the whole lines of a
 * chunk together when they pass, else each on its own, so a refusal names its line either way. A
 * line that takes the body past `maxBytes` (every byte counts, newlines too) ends the stream with
 * resource_exhausted, and a line that cannot be read ends it with its error; either way the lines
 * before it are handed to the handler first.
 */
export function ndjsonMessages(
  chunks: AsyncIterable<Buffer>,
  schema: DescMessage,
  maxBytes: number,
): BatchedMessages<Message> {
  return batchedMessages(ndjsonBatches(chunks, schema, maxBytes));
}

async function* ndjsonBatches(
  chunks: AsyncIterable<Buffer>,
  schema: DescMessage,
  maxBytes: number,
): AsyncGenerator<Message[]> {
  let parts: Buffer[] = []; // the line being read
  let partBytes = 0;
  let consumed = 0;
  let lineNo = 0;
  const over = (n: number) =>
    new ConnectError(
      `line ${n} takes the request body over ${maxBytes} bytes; send it in a new request`,
      Code.ResourceExhausted,
    );
  /**
   * The message of line `lineNo`, its text checked (see jsonText) and without its newline;
   * undefined when blank.
   */
  const decodeLine = (line: string): Message | undefined => {
    if (line.length === 0 || (line.charCodeAt(0) !== openBrace && line.trim() === ""))
      return undefined;
    const what = `line ${lineNo}`;
    const json = parseJsonObject(line, what);
    return decodeJson(schema, json, { what, line: lineNo });
  };
  // `raw` is the line as sent, with its newline when it had one.
  const parseLine = (raw: Buffer): Message | undefined => {
    lineNo++;
    consumed += raw.length;
    if (consumed > maxBytes) throw over(lineNo);
    // The newline (and a CR before it) is cut from the bytes: one string per line, not two.
    let end = raw.length;
    if (end > 0 && raw[end - 1] === newline)
      end -= end > 1 && raw[end - 2] === carriageReturn ? 2 : 1;
    return decodeLine(jsonText(raw.subarray(0, end), `line ${lineNo}`));
  };
  /**
   * The whole lines of `block` (it ends with a newline) into `batch`. The usual block — within the
   * bound, valid UTF-8, no run of 16 digits (so no integer past 2^53) — is checked and decoded as
   * one text, then cut into lines: one check per body chunk instead of one per line. Any other is
   * read line by line, each checked on its own bytes, so every refusal names its line as before.
   */
  const readLines = (block: Buffer, batch: Message[]): void => {
    if (consumed + block.length <= maxBytes && isUtf8(block)) {
      const text = block.toString("utf8");
      if (!mayHoldUnsafeInteger(text)) {
        consumed += block.length;
        for (let from = 0; from < text.length;) {
          const to = text.indexOf("\n", from);
          lineNo++;
          const message = decodeLine(
            text.slice(from, to > from && text.charCodeAt(to - 1) === carriageReturn ? to - 1 : to),
          );
          from = to + 1;
          if (message) batch.push(message);
        }
        return;
      }
    }
    let start = 0;
    let nl: number;
    while ((nl = block.indexOf(newline, start)) !== -1) {
      const message = parseLine(block.subarray(start, nl + 1));
      start = nl + 1;
      if (message) batch.push(message);
    }
  };
  const takeLine = (): Buffer => {
    const raw = parts.length === 1 ? parts[0]! : Buffer.concat(parts);
    parts = [];
    partBytes = 0;
    return raw;
  };
  for await (const chunk of chunks) {
    const batch: Message[] = [];
    let failure: { readonly err: unknown } | undefined;
    try {
      let start = 0;
      const first = chunk.indexOf(newline);
      if (first !== -1 && parts.length > 0) {
        // The line an earlier chunk began ends here.
        parts.push(chunk.subarray(0, first + 1));
        start = first + 1;
        const message = parseLine(takeLine());
        if (message) batch.push(message);
      }
      const last = chunk.lastIndexOf(newline);
      if (last >= start) {
        readLines(chunk.subarray(start, last + 1), batch);
        start = last + 1;
      }
      if (start < chunk.length) {
        parts.push(chunk.subarray(start));
        partBytes += chunk.length - start;
      }
      if (partBytes + consumed > maxBytes) throw over(lineNo + 1);
    } catch (err) {
      failure = { err };
    }
    if (batch.length > 0) yield batch;
    if (failure) throw failure.err;
  }
  if (partBytes > 0) {
    const message = parseLine(takeLine());
    if (message) yield [message];
  }
}
