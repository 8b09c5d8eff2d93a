import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import type { ContextValues, HandlerContext } from "@connectrpc/connect";
import { toConnectError } from "../errors.js";
import { stopUnreadBody } from "./stream-end.js";
import { writeError, writeJson } from "./error-json.js";
import { serveRest, type RestBinding } from "./handler-factory.js";
import { createRouteMatcher, pathParams } from "./route-match.js";

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

/**
 * The v1 REST surface, built from the route options: it decodes proto3 JSON
 * (or NDJSON, one message per line, or a raw body), calls the same handler
 * the Connect adapter calls, and encodes the reply by the route's body mapping.
 */
export function createRestRouter(
  options: RestRouterOptions,
): (req: Http2ServerRequest, res: Http2ServerResponse) => void {
  const match = createRouteMatcher(options.bindings);
  return (req, res) => {
    res.stream.once("finish", () => stopUnreadBody(req, res));
    const url = new URL(req.url, "https://forelead.invalid");
    const found = match(req.method, url.pathname);
    if (found.kind === "refused") {
      if (found.allow) res.setHeader("allow", found.allow);
      return writeJson(res, found.status, found.body);
    }
    const { route } = found;
    const serve = async () =>
      serveRest(route.binding, {
        req,
        res,
        url,
        pathFields: () => pathParams(route, url.pathname),
        contextValues: options.contextValues(req),
        maxBodyBytes: options.maxBodyBytes,
        preauthorize: options.preauthorize,
      });
    void serve().catch((err) =>
      writeError(res, toConnectError(err, `${req.method} ${url.pathname}`)),
    );
  };
}
