import { constants as http2Constants, type Http2ServerRequest, type Http2ServerResponse } from "node:http2";
import { StringDecoder } from "node:string_decoder";
import { create, fromJson, toJson, type DescMessage, type DescMethod, type JsonValue, type Message, type MessageInitShape } from "@bufbuild/protobuf";
import { reflect } from "@bufbuild/protobuf/reflect";
import { Code, ConnectError, createHandlerContext, type ContextValues, type HandlerContext, type MethodImplSpec } from "@connectrpc/connect";
import { errorBody, httpStatusOf, toConnectError } from "./errors.js";
import { messageStreamFormat, writeMessageStream } from "./rest-streams.js";
import { routeOf, type RouteEntry } from "./routes.js";

/** A route with the (guarded) implementation that serves it. */
export interface RestBinding {
  readonly entry: RouteEntry;
  readonly spec: MethodImplSpec;
}

/** Options of the REST router. */
export interface RestRouterOptions {
  readonly bindings: readonly RestBinding[];
  /** The same context values the Connect adapter gives its handlers. */
  readonly contextValues: (req: Http2ServerRequest) => ContextValues;
  /** Byte bound of a request body (JSON or NDJSON). */
  readonly maxBodyBytes: number;
  /** Decides who may call before any body byte is read; throws to refuse. */
  readonly preauthorize?: (ctx: HandlerContext) => void;
}

type Handler = (req: Http2ServerRequest, res: Http2ServerResponse) => void;

interface CompiledRoute {
  readonly binding: RestBinding;
  readonly pattern: RegExp;
  /** JSON names of the request fields bound by path segments, in order. */
  readonly params: readonly string[];
}

/**
 * The v1 REST surface, built from the route options: it decodes proto3 JSON
 * (or NDJSON, one message per line), calls the same handler the Connect
 * adapter calls, and encodes the reply by the route's body mapping.
 */
export function createRestRouter(options: RestRouterOptions): Handler {
  const routes = options.bindings.map(compile);
  return (req, res) => {
    res.stream.once("finish", () => stopUnreadBody(req, res));
    const url = new URL(req.url, "https://forelead.invalid");
    const candidates = routes.filter((r) => r.pattern.test(url.pathname));
    const route = candidates.find((r) => r.binding.entry.httpMethod === req.method);
    if (!route) {
      if (candidates.length > 0) {
        const allowed = [...new Set(candidates.map((r) => r.binding.entry.httpMethod))].join(", ");
        res.setHeader("allow", allowed);
        return writeJson(res, 405, { code: "unimplemented", message: `${req.method} ${url.pathname} is not served; use ${allowed}` });
      }
      return writeJson(res, 404, { code: "not_found", message: `no route ${req.method} ${url.pathname}; docs/routes.md lists the routes` });
    }
    void serve(route, req, res, url, options).catch((err) => writeError(res, toConnectError(err, `${req.method} ${url.pathname}`)));
  };
}

function compile(binding: RestBinding): CompiledRoute {
  const params: string[] = [];
  const source = binding.entry.path
    .split("/")
    .map((segment) => {
      const m = /^\{(\w+)\}$/.exec(segment);
      if (!m) return segment.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
      params.push(m[1]!);
      return "([^/]+)";
    })
    .join("/");
  return { binding, pattern: new RegExp(`^${source}$`), params };
}

async function serve(route: CompiledRoute, req: Http2ServerRequest, res: Http2ServerResponse, url: URL, options: RestRouterOptions): Promise<void> {
  const { entry, spec } = route.binding;
  const { method } = entry;
  const ctx = createRestContext(req, res, entry, url, options.contextValues(req));
  options.preauthorize?.(ctx);
  const bound = pathParams(route, url.pathname);

  const fromHeaders = headerFields(req, entry);

  if (spec.kind === "bidi_streaming") throw new ConnectError(`${method.name} is not served on REST`, Code.Unimplemented);
  if (spec.kind === "client_streaming") {
    const messages = entry.option.rawRequestBody
      ? rawBodyMessages(req, entry, { ...fromHeaders, ...bound })
      : ndjsonMessages(req, method.input, options.maxBodyBytes);
    let reply: MessageInitShape<DescMessage>;
    try {
      reply = await spec.impl(messages, ctx);
    } finally {
      // A handler may stop reading early: let go of the body (see stopUnreadBody). Not awaited: a
      // handler that gave up while a read was pending (the time bound) would wait for a byte that
      // never comes; the queued return completes once the stream is reset.
      void messages.return(undefined).catch(() => {});
    }
    return writeReply(res, method, create(method.output, reply));
  }

  const json = req.method === "GET" ? queryJson(url, method.input) : await readJsonBody(req, options.maxBodyBytes);
  // A reconnecting EventSource says where it stopped in Last-Event-ID; the route names the field it binds.
  const resumeField = entry.option.lastEventIdField;
  const lastEventId = req.headers["last-event-id"];
  if (resumeField && typeof lastEventId === "string" && lastEventId && json[resumeField] === undefined) json[resumeField] = lastEventId;
  const input = decode(method.input, { ...json, ...fromHeaders, ...bound }, "request body");

  if (spec.kind === "server_streaming" && entry.option.ndjsonResponse) {
    const messages = spec.impl(input, ctx)[Symbol.asyncIterator]();
    const format = messageStreamFormat(entry.option, method, input, req.headers.accept);
    const where = `${req.method} ${url.pathname}`;
    return writeMessageStream(res, entry.option, method, format, messages, (err) => writeError(res, err), (err) => toConnectError(err, where));
  }

  if (spec.kind === "server_streaming") {
    const chunks = spec.impl(input, ctx)[Symbol.asyncIterator]();
    const first = await chunks.next(); // errors before the first byte still get a JSON error reply
    res.writeHead(200, { ...responseHeaderFields(entry, first.done ? undefined : first.value), "content-type": entry.option.rawResponseContentType });
    try {
      for (let r = first; !r.done; r = await chunks.next()) {
        const data = r.value["data"];
        if (data instanceof Uint8Array && data.length > 0 && !res.write(data)) await drained(res);
      }
      res.end();
    } catch (err) {
      writeError(res, toConnectError(err, `${req.method} ${url.pathname}`));
    }
    return;
  }

  const reply = await spec.impl(input, ctx);
  writeReply(res, method, create(method.output, reply));
}

/** The request fields the route reads from headers (`header_fields`), as JSON. */
function headerFields(req: Http2ServerRequest, entry: RouteEntry): Record<string, JsonValue> {
  const out: Record<string, JsonValue> = {};
  for (const { header, field } of entry.option.headerFields) {
    const value = req.headers[header];
    if (value === undefined) continue;
    out[field] = Array.isArray(value) ? value.join(", ") : value;
    decode(entry.method.input, { [field]: out[field]! }, `header ${header}`); // a bad value is a 400 naming the header
  }
  return out;
}

/** The reply headers a raw response takes from its first message (`response_header_fields`). */
function responseHeaderFields(entry: RouteEntry, first: MessageInitShape<DescMessage> | undefined): Record<string, string> {
  if (!first || entry.option.responseHeaderFields.length === 0) return {};
  const json = toJson(entry.method.output, create(entry.method.output, first), { alwaysEmitImplicit: true }) as Record<string, JsonValue>;
  const out: Record<string, string> = {};
  for (const { header, field } of entry.option.responseHeaderFields) {
    const value = json[field];
    if (value !== undefined && value !== null && value !== "") out[header] = String(value);
  }
  return out;
}

/**
 * A raw request body as request messages (`raw_request_body`): the first
 * carries the fields from the path and headers (decoded like a JSON body,
 * so a bad header is a 400 naming its field) and the first chunk; each later
 * message carries only the next chunk. Chunks are handed over as they
 * arrive, never gathered, and always at least one message is yielded, so an
 * empty body still reaches the handler. The handler bounds the body. A body
 * not sent as the route's raw_request_content_type is invalid_argument.
 */
async function* rawBodyMessages(req: Http2ServerRequest, entry: RouteEntry, fields: Record<string, JsonValue>): AsyncGenerator<Message> {
  const { rawRequestBody, rawRequestContentType } = entry.option;
  if (rawRequestContentType) {
    const given = String(req.headers["content-type"] ?? "").split(";")[0]!.trim().toLowerCase();
    if (given !== rawRequestContentType) throw new ConnectError(`send the request body as ${rawRequestContentType}, not ${JSON.stringify(given || "(no content-type)")}`, Code.InvalidArgument);
  }
  const schema = entry.method.input;
  const field = schema.fields.find((f) => f.name === rawRequestBody)!;
  const head = decode(schema, fields, "request");
  const chunks = bodyChunks(req)[Symbol.asyncIterator]();
  try {
    const first = await chunks.next();
    reflect(schema, head).set(field, first.done ? new Uint8Array(0) : first.value);
    yield head;
    if (first.done) return;
    for (let r = await chunks.next(); !r.done; r = await chunks.next()) {
      yield create(schema, { [field.localName]: r.value });
    }
  } finally {
    await chunks.return?.();
  }
}

/**
 * The request body's chunks. Stopping early leaves the stream alive (the
 * reply is still to be written) and stops listening, so the rest can be
 * drained once the reply is sent.
 */
function bodyChunks(req: Http2ServerRequest): AsyncIterable<Buffer> {
  return req.iterator({ destroyOnReturn: false }) as AsyncIterable<Buffer>;
}

function createRestContext(req: Http2ServerRequest, res: Http2ServerResponse, entry: RouteEntry, url: URL, contextValues: ContextValues): HandlerContext {
  const abort = new AbortController();
  // Every stream closes; only one closed before its reply was sent is a cancel. (Aborting after
  // every reply built an error and ran the abort listeners per request: ~5% of a claim's CPU.)
  req.once("close", () => {
    if (!res.writableFinished) abort.abort(new ConnectError("the client closed the request", Code.Canceled));
  });
  const requestHeader = new Headers();
  for (const [k, v] of Object.entries(req.headers)) {
    if (!k.startsWith(":") && v !== undefined) requestHeader.set(k, Array.isArray(v) ? v.join(", ") : String(v));
  }
  return createHandlerContext({
    service: entry.service,
    method: entry.method,
    protocolName: "rest",
    requestMethod: req.method,
    url: url.toString(),
    requestSignal: abort.signal,
    requestHeader,
    contextValues,
  });
}

function pathParams(route: CompiledRoute, pathname: string): Record<string, string> {
  const m = route.pattern.exec(pathname);
  const out: Record<string, string> = {};
  route.params.forEach((name, i) => (out[name] = decodeURIComponent(m?.[i + 1] ?? "")));
  return out;
}

/** Query parameters as proto3 JSON: repeated fields collect every value, bools accept true/false/1/0. */
function queryJson(url: URL, schema: DescMessage): Record<string, JsonValue> {
  const out: Record<string, JsonValue> = {};
  for (const field of schema.fields) {
    const values = url.searchParams.getAll(field.jsonName);
    if (values.length === 0) continue;
    const isBool = field.fieldKind === "scalar" && field.scalar === 8; // ScalarType.BOOL
    const convert = (v: string): JsonValue => (isBool ? v === "true" || v === "1" : v);
    out[field.jsonName] = field.fieldKind === "list" ? values.map(convert) : convert(values[values.length - 1]!);
  }
  return out;
}

async function readJsonBody(req: Http2ServerRequest, maxBytes: number): Promise<Record<string, JsonValue>> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > maxBytes) throw tooLarge(`the request body is over ${maxBytes} bytes; send a smaller body`);
    chunks.push(chunk);
  }
  const text = Buffer.concat(chunks).toString("utf8");
  if (text.trim() === "") return {};
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw new ConnectError(`the request body is not valid JSON: ${jsonSyntaxReason(err)}`, Code.InvalidArgument);
  }
  if (json === null || typeof json !== "object" || Array.isArray(json)) {
    throw new ConnectError("the request body must be a JSON object", Code.InvalidArgument);
  }
  return json as Record<string, JsonValue>;
}

/** JSON.parse's reason without the excerpt of the input V8 quotes in it, which could hold a lease token. */
function jsonSyntaxReason(err: unknown): string {
  return (err as Error).message.replace(/,\s*(?:\.\.\.)?".*"(?:\.\.\.)? is not valid JSON$/s, "");
}

/**
 * Decodes proto3 JSON, ignoring unknown fields; a wrong type is
 * invalid_argument naming the field (protobuf-es names it in its message).
 */
export function decode<T extends DescMessage>(schema: T, json: JsonValue, what: string): Message & ReturnType<typeof fromJson<T>> {
  try {
    return fromJson(schema, json, { ignoreUnknownFields: true });
  } catch (err) {
    const text = (err as Error).message.replace(/^cannot decode (field|message) [\w.]+?\.(\w+) from JSON: /, (_m, kind, name) => (kind === "field" ? `field "${jsonNameOf(schema, name)}": ` : ""));
    throw new ConnectError(`${what}: ${text}`, Code.InvalidArgument);
  }
}

function jsonNameOf(schema: DescMessage, protoName: string): string {
  return schema.fields.find((f) => f.name === protoName)?.jsonName ?? protoName;
}

const ndjsonLines = new WeakMap<object, number>();

/** The NDJSON line a request message was read from, when it came from the REST surface. */
export function ndjsonLineOf(message: object): number | undefined {
  return ndjsonLines.get(message);
}

/**
 * NDJSON request messages, read incrementally: never more than one line is
 * buffered. Lines are numbered from 1 (see ndjsonLineOf); blank lines are
 * skipped. A line that pushes the body past `maxBytes` ends the stream with
 * 413; lines before it have already been handed to the handler.
 */
async function* ndjsonMessages(req: Http2ServerRequest, schema: DescMessage, maxBytes: number): AsyncGenerator<Message> {
  const decoder = new StringDecoder("utf8");
  let pending = "";
  let consumed = 0;
  let lineNo = 0;
  // `raw` is the line as sent, with its newline when it had one: the bound counts every byte of the body.
  const parseLine = (raw: string): Message | undefined => {
    lineNo++;
    consumed += Buffer.byteLength(raw, "utf8");
    if (consumed > maxBytes) throw tooLarge(`line ${lineNo} takes the request body over ${maxBytes} bytes; send it in a new request`);
    const line = raw.replace(/\r?\n$/, "");
    if (line.trim() === "") return undefined;
    let json: JsonValue;
    try {
      json = JSON.parse(line) as JsonValue;
    } catch (err) {
      throw new ConnectError(`line ${lineNo} is not valid JSON: ${jsonSyntaxReason(err)}`, Code.InvalidArgument);
    }
    if (json === null || typeof json !== "object" || Array.isArray(json)) {
      throw new ConnectError(`line ${lineNo} must be a JSON object`, Code.InvalidArgument);
    }
    const message = decode(schema, json, `line ${lineNo}`);
    ndjsonLines.set(message, lineNo);
    return message;
  };
  for await (const chunk of bodyChunks(req)) {
    pending += decoder.write(chunk);
    let nl: number;
    while ((nl = pending.indexOf("\n")) !== -1) {
      const message = parseLine(pending.slice(0, nl + 1));
      pending = pending.slice(nl + 1);
      if (message) yield message;
    }
    if (Buffer.byteLength(pending, "utf8") + consumed > maxBytes) {
      throw tooLarge(`line ${lineNo + 1} takes the request body over ${maxBytes} bytes; send it in a new request`);
    }
  }
  pending += decoder.end();
  if (pending.length > 0) {
    const message = parseLine(pending);
    if (message) yield message;
  }
}

/** A body over its byte bound: resource_exhausted, 413 on REST (see errors.ts). */
function tooLarge(message: string): ConnectError {
  return new ConnectError(message, Code.ResourceExhausted);
}

function writeReply(res: Http2ServerResponse, method: DescMethod, reply: Message): void {
  const body = routeBody(method, reply);
  if (body === undefined) {
    res.writeHead(204);
    res.end();
    return;
  }
  writeJson(res, 200, body);
}

/** The REST body of a reply by the route's body mapping; undefined means 204. */
function routeBody(method: DescMethod, reply: Message): JsonValue | undefined {
  const route = routeOf(method);
  if (route.responseBody) {
    const field = method.output.fields.find((f) => f.name === route.responseBody);
    if (!field || field.fieldKind !== "message") throw new Error(`${method.name}: response_body ${route.responseBody} is not a message field`);
    const value = (reply as unknown as Record<string, Message | undefined>)[field.localName];
    if (value === undefined) {
      if (route.noContentWhenEmpty) return undefined;
      throw new Error(`${method.name}: the reply has no ${route.responseBody}`);
    }
    return toJson(field.message, value);
  }
  const json = toJson(method.output, reply);
  if (route.noContentWhenEmpty && json !== null && typeof json === "object" && Object.keys(json).length === 0) return undefined;
  return json;
}

function writeJson(res: Http2ServerResponse, status: number, body: JsonValue): void {
  if (res.headersSent) return;
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
  res.end(text);
}

function writeError(res: Http2ServerResponse, err: ConnectError): void {
  if (res.headersSent) {
    res.stream.close(2); // NGHTTP2_INTERNAL_ERROR: the client sees a broken stream, never a truncated success
    return;
  }
  err.metadata.forEach((value, key) => res.setHeader(key, value));
  writeJson(res, httpStatusOf(err), errorBody(err));
}

/**
 * A reply can be complete before the client has sent its whole body (413, a
 * refusal before an NDJSON stream or a raw upload is read). RST_STREAM
 * NO_ERROR then asks the client to stop sending (RFC 9113 section 8.1);
 * without it the stream stays open on the server, its window shut, until the
 * whole connection closes. A body a handler stopped reading part way is
 * paused with bytes buffered; Node destroys a stream closed with NO_ERROR
 * only once its readable side ends, so the rest is drained and dropped.
 */
function stopUnreadBody(req: Http2ServerRequest, res: Http2ServerResponse): void {
  const stream = res.stream;
  if (stream.destroyed || stream.closed) return;
  // A body read to its end needs no reset (nghttp2's remoteClose can lag behind it): a reset sent
  // right after a 204 made a Node client drop the reply (an NDJSON stream request read in full).
  if (req.readableEnded) return;
  if (stream.state.remoteClose === 0) stream.close(http2Constants.NGHTTP2_NO_ERROR);
  req.resume();
}

function drained(res: Http2ServerResponse): Promise<void> {
  return new Promise((resolve) => res.once("drain", resolve));
}
