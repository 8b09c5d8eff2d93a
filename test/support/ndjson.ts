import type http2 from "node:http2";
import type { RestClient, RestReply } from "./clients.js";
import { jsonOrUndefined } from "../../src/runner/transport/rest-transport.js";

/**
 * An NDJSON request kept open: lines are written as the test decides, the reply may come before
 * `end`.
 */
export interface OpenNdjsonRequest {
  /** Writes one line (objects JSON-encoded, strings as they are) and a newline. */
  write(line: unknown): void;
  /** Ends the body and waits for the reply. */
  end(): Promise<RestReply>;
  /** The reply, whenever the server sends it (also before the body ended). */
  readonly reply: Promise<RestReply>;
}

/** Opens `POST path` with an NDJSON body on the client's connection. */
export function openNdjson(rest: RestClient, path: string): OpenNdjsonRequest {
  const stream = rest.session.request({
    ":method": "POST",
    ":path": path,
    "content-type": "application/x-ndjson",
  });
  // a reset after an early reply is expected; the reply says what happened
  stream.on("error", () => {});
  const reply = new Promise<RestReply>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let headers: http2.IncomingHttpHeaders = {};
    stream.on("response", (h) => (headers = h));
    stream.on("data", (c: Buffer) => chunks.push(c));
    // The reply may end while our side is still open (the server cut the request): "end", not
    // "close".
    stream.on("end", () => finish());
    stream.on("close", () => finish());
    let finished = false;
    const finish = () => {
      if (finished) return;
      finished = true;
      if (!stream.writableFinished) stream.close(); // the reply came first: stop sending
      if (headers[":status"] === undefined)
        return reject(
          new Error(`${path}: the stream closed without a reply (code ${stream.rstCode})`),
        );
      const text = Buffer.concat(chunks).toString("utf8");
      resolve({ status: Number(headers[":status"]), headers, text, json: jsonOrUndefined(text) });
    };
  });
  return {
    write(line) {
      if (!stream.writable) return;
      stream.write(`${typeof line === "string" ? line : JSON.stringify(line)}\n`);
    },
    end() {
      if (stream.writable) stream.end();
      return reply;
    },
    reply,
  };
}

/** Reads a text/event-stream response incrementally: each parsed event is handed to `onEvent`. */
export function readEventStream(
  rest: RestClient,
  path: string,
  onEvent: (e: { event: string; id?: string; data: string }) => void,
  headers: http2.OutgoingHttpHeaders = {},
): { status: Promise<number>; done: Promise<void>; close(): void } {
  const stream = rest.session.request({
    ":method": "GET",
    ":path": path,
    accept: "text/event-stream",
    ...headers,
  });
  stream.on("error", () => {});
  let buffer = "";
  const status = new Promise<number>((resolve) =>
    stream.on("response", (h) => resolve(Number(h[":status"]))),
  );
  stream.setEncoding("utf8");
  stream.on("data", (chunk: string) => {
    buffer += chunk;
    let end: number;
    while ((end = buffer.indexOf("\n\n")) !== -1) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const e: { event: string; id?: string; data: string } = { event: "message", data: "" };
      for (const line of block.split("\n")) {
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = line.slice(0, colon);
        const value = line.slice(colon + 1).replace(/^ /, "");
        if (field === "event") e.event = value;
        else if (field === "id") e.id = value;
        else if (field === "data") e.data += value;
      }
      if (block.split("\n").every((l) => l.startsWith(":"))) continue;
      onEvent(e);
    }
  });
  const done = new Promise<void>((resolve) => stream.on("close", () => resolve()));
  return { status, done, close: () => stream.close() };
}
