import { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import type { DescService } from "@bufbuild/protobuf";
import {
  createServiceImplSpec,
  type ContextValues,
  type Interceptor,
  type MethodImplSpec,
  type ServiceImpl,
  type ServiceImplSpec,
} from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { toConnectError } from "./errors.js";
import { authorizeOnce, guardService, type GuardOptions } from "./guard.js";
import { jsonText } from "../protocol/json/wire.js";
import { createRestRouter } from "./rest/index.js";
import { routeTable, type RouteEntry } from "./routes.js";
import { services } from "./services.js";
import { markInvalidUtf8InBinary } from "../protocol/text-rules.js";

/**
 * A service with its implementation, as Connect's typed spec. Unlike
 * createServiceImplSpec, which takes a partial implementation and answers
 * the missing methods with unimplemented, a missing method here fails to compile.
 */
export function serviceImpl<S extends DescService>(
  service: S,
  impl: ServiceImpl<S>,
): ServiceImplSpec {
  return createServiceImplSpec<S>(service, impl);
}

/** What the two surfaces need. */
export interface ApiHandlerOptions {
  /** One unguarded implementation for every service of services.ts. */
  readonly implementations: readonly ServiceImplSpec[];
  readonly guard: GuardOptions;
  /** The context values of a request; the same for both surfaces. */
  readonly contextValues: (req: Http2ServerRequest) => ContextValues;
  /** Byte bound of one request body. */
  readonly maxBodyBytes: number;
}

/**
 * The handler of every API request: the guarded implementations served as
 * Connect, gRPC and gRPC-Web procedures, and every other path by the REST
 * router built from the route options.
 */
export function createApiHandler(
  options: ApiHandlerOptions,
): (req: Http2ServerRequest, res: Http2ServerResponse) => void {
  const unlisted = options.implementations.find((impl) => !services.includes(impl.service));
  if (unlisted)
    throw new Error(
      `${unlisted.service.typeName} has an implementation but is not listed in src/api/services.ts`,
    );
  markInvalidUtf8InBinary();
  const guarded = services.map((service) => {
    const impls = options.implementations.filter((impl) => impl.service === service);
    if (impls.length !== 1)
      throw new Error(
        `${service.typeName} is listed in src/api/services.ts but has ` +
          `${impls.length === 0 ? "no implementation" : "more than one"}`,
      );
    return guardService(impls[0]!, options.guard);
  });
  const methodSpec = (entry: RouteEntry): MethodImplSpec => {
    const spec = guarded.find((s) => s.service === entry.service)?.methods[entry.method.localName];
    if (!spec)
      throw new Error(`${entry.service.typeName}.${entry.method.name} has no implementation`);
    return spec;
  };
  const rest = createRestRouter({
    bindings: routeTable(services).map((entry) => ({ entry, spec: methodSpec(entry) })),
    contextValues: options.contextValues,
    maxBodyBytes: options.maxBodyBytes,
    preauthorize: (ctx) => void authorizeOnce(ctx, options.guard),
  });
  return connectNodeAdapter({
    routes: (router) => {
      for (const spec of guarded)
        for (const method of Object.values(spec.methods)) router.rpc(method.method, method.impl);
    },
    fallback: (req, res) => rest(http2Request(req), http2Response(res)),
    contextValues: (req) => options.contextValues(http2Request(req)),
    interceptors: [internalErrors],
    readMaxBytes: options.maxBodyBytes,
    jsonOptions: connectJsonOptions,
  });
}

/**
 * How Connect reads JSON: unknown fields ignored, and the REST body's byte
 * checks (invalid UTF-8, integers past 2^53; protocol/json/wire.ts) before JSON.parse.
 * The adapter hands these options to Connect's JSON serialization, which
 * takes a textDecoder, though the adapter's type does not name it.
 */
const connectJsonOptions = {
  ignoreUnknownFields: true,
  textDecoder: {
    decode: (bytes?: Uint8Array) => jsonText(bytes ?? new Uint8Array(0), "the request message"),
  },
} as { ignoreUnknownFields: boolean };

/** Errors that are not ConnectErrors are logged with an incident id, never sent as they are. */
const internalErrors: Interceptor = (next) => async (req) => {
  try {
    return await next(req);
  } catch (err) {
    throw toConnectError(err, `${req.service.typeName}/${req.method.name}`);
  }
};

// The listener is HTTP/2 only (allowHTTP1: false); the adapter's types also admit HTTP/1.1.
function http2Request(req: object): Http2ServerRequest {
  if (req instanceof Http2ServerRequest) return req;
  throw new Error("an HTTP/1.1 request reached the HTTP/2-only API handler");
}

function http2Response(res: object): Http2ServerResponse {
  if (res instanceof Http2ServerResponse) return res;
  throw new Error("an HTTP/1.1 response reached the HTTP/2-only API handler");
}
