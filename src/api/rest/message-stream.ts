import type { Http2ServerResponse } from "node:http2";
import {
  create,
  type DescMessage,
  type DescMethod,
  type JsonValue,
  type Message,
  type MessageInitShape,
} from "@bufbuild/protobuf";
import { reflect } from "@bufbuild/protobuf/reflect";
import type { Route } from "../../../gen/forelead/api/v1/route_pb.js";
import { encodeJson } from "../../protocol/json/codec.js";
import { logEntryText } from "../../protocol/log-text.js";
import { toConnectError } from "../errors.js";
import { drained, streamGone } from "./stream-end.js";
import { errorBody, writeError } from "./error-json.js";

/**
 * How REST writes a server stream of messages (route option ndjson_response and its companions).
 */
export type MessageStreamFormat = "ndjson" | "event-stream" | "text";

const contentTypes: Record<MessageStreamFormat, string> = {
  ndjson: "application/x-ndjson",
  "event-stream": "text/event-stream",
  text: "text/plain; charset=utf-8",
};

/**
 * An event stream sends its headers once the first message is ready, or after this long without
 * one.
 */
const eventStreamHeaderDelayMs = 250;
/**
 * An event name written as an "event:" line: one line, and never one of the stream's own "end" and
 * "error".
 */
const sseName = /^(?!(?:end|error)$)[A-Za-z0-9._:-]{1,100}$/;
/** An idle event stream sends a comment this often, so proxies keep it open. */
const keepaliveMs = 15_000;

/**
 * The format a request asks for: Server-Sent Events when the route's
 * event_stream_field is true in the request, text when the route has a
 * text_field and the client accepts text/plain, NDJSON otherwise.
 */
export function messageStreamFormat(
  route: Route,
  method: DescMethod,
  input: Message,
  accept: string | undefined,
): MessageStreamFormat {
  if (route.eventStreamField) {
    const field = method.input.fields.find((f) => f.jsonName === route.eventStreamField);
    if (field && reflect(method.input, input).get(field) === true) return "event-stream";
  }
  if (route.textField && accept && /\btext\/plain\b/.test(accept)) return "text";
  return "ndjson";
}

/**
 * Writes a server stream of messages. An error before the headers are sent
 * gets the ordinary JSON error reply; after them, an event
 * stream ends with an "error" event and the other formats with a broken
 * stream (never a truncated success). An event stream's normal end is an
 * "end" event, so EventSource clients close instead of reconnecting.
 */
export async function writeMessageStream(
  res: Http2ServerResponse,
  route: Route,
  method: DescMethod,
  format: MessageStreamFormat,
  messages: AsyncIterator<MessageInitShape<DescMessage>>,
  where: string,
): Promise<void> {
  const gone = () => streamGone(res);
  const sendHeaders = () => {
    if (!res.headersSent)
      res.writeHead(200, {
        "content-type": contentTypes[format],
        ...(format === "event-stream" ? { "cache-control": "no-cache" } : {}),
      });
  };
  const encode = (value: MessageInitShape<DescMessage>): string => {
    const json = encodeJson(method.output, create(method.output, value)) as Record<
      string,
      JsonValue
    >;
    if (format === "ndjson") return `${JSON.stringify(json)}\n`;
    if (format === "text") return logEntryText(json[route.textField]);
    const id = route.eventIdField ? json[route.eventIdField] : undefined;
    const type = route.eventTypeField ? json[route.eventTypeField] : undefined;
    return (
      `${typeof id === "string" && id ? `id: ${id}\n` : ""}` +
      `${typeof type === "string" && sseName.test(type) ? `event: ${type}\n` : ""}data: ` +
      `${JSON.stringify(json)}\n\n`
    );
  };
  const keepalive =
    format === "event-stream"
      ? setInterval(() => res.headersSent && !gone() && res.write(": keepalive\n\n"), keepaliveMs)
      : undefined;
  let next = messages.next();
  try {
    if (format === "event-stream") {
      let timer: NodeJS.Timeout | undefined;
      const first = await Promise.race([
        next,
        new Promise<undefined>(
          (resolve) => (timer = setTimeout(() => resolve(undefined), eventStreamHeaderDelayMs)),
        ),
      ]);
      clearTimeout(timer);
      // a follower waiting for the first entry learns at once that it is connected
      if (first === undefined) sendHeaders();
    }
    for (let r = await next; !r.done; r = await next) {
      sendHeaders();
      if (!res.write(encode(r.value))) await drained(res);
      if (gone()) return; // the client left: stop the handler (finally)
      next = messages.next();
    }
    if (gone()) return;
    sendHeaders();
    if (format === "event-stream") res.end("event: end\ndata: {}\n\n");
    else res.end();
  } catch (thrown) {
    const err = toConnectError(thrown, where);
    if (format === "event-stream" && res.headersSent && !gone())
      res.end(`event: error\ndata: ${JSON.stringify(errorBody(err))}\n\n`);
    else writeError(res, err);
  } finally {
    clearInterval(keepalive);
    if (gone()) void messages.return?.().catch(() => {});
  }
}
