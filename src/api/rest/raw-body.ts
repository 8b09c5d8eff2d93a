import {
  create,
  type DescField,
  type DescMessage,
  type JsonValue,
  type Message,
} from "@bufbuild/protobuf";
import { reflect } from "@bufbuild/protobuf/reflect";
import { requireContentType } from "./content-type.js";
import { decodeJson } from "../../protocol/json/codec.js";

/**
 * How a route reads a raw request body (route options raw_request_body, raw_request_content_type).
 */
export interface RawBody {
  readonly schema: DescMessage;
  /** The bytes field (proto name) each message carries the body's bytes in. */
  readonly bytesField: string;
  /** The content type the body must be sent with; "" for any. */
  readonly contentType: string;
}

/**
 * A raw request body as request messages: the first carries the fields from
 * the path and headers (`fields`, decoded like a JSON body) and the first
 * chunk; each later message carries only the next chunk. Chunks are handed
 * over as they arrive, never gathered, and always at least one message is
 * yielded, so an empty body still reaches the handler. The handler bounds
 * the body. A body not sent as `contentType` is invalid_argument, raised at
 * the first read.
 */
export async function* rawBodyMessages(
  chunks: AsyncIterable<Buffer>,
  body: RawBody,
  contentTypeHeader: string | undefined,
  fields: Record<string, JsonValue>,
): AsyncGenerator<Message> {
  if (body.contentType) requireContentType(contentTypeHeader, body.contentType);
  const { schema } = body;
  const field = bytesFieldOf(body);
  const head = decodeJson(schema, fields, { what: "request" });
  const it = chunks[Symbol.asyncIterator]();
  try {
    const first = await it.next();
    reflect(schema, head).set(field, first.done ? new Uint8Array(0) : first.value);
    yield head;
    if (first.done) return;
    for (let r = await it.next(); !r.done; r = await it.next()) {
      yield create(schema, { [field.localName]: r.value });
    }
  } finally {
    await it.return?.();
  }
}

function bytesFieldOf(body: RawBody): DescField {
  const field = body.schema.fields.find((f) => f.name === body.bytesField);
  // routeTable checked it at start-up
  if (!field) throw new Error(`${body.schema.typeName} has no field ${body.bytesField}`);
  return field;
}
