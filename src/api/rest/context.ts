import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import { Code, ConnectError, createHandlerContext, type ContextValues, type HandlerContext } from "@connectrpc/connect";
import type { RouteEntry } from "../routes.js";

/**
 * The handler context of a REST request, as the Connect adapter builds one:
 * protocol "rest", the request's headers (pseudo-headers aside), and a signal
 * that aborts when the client closes the stream before its reply is sent.
 */
export function createRestContext(req: Http2ServerRequest, res: Http2ServerResponse, entry: RouteEntry, url: URL, contextValues: ContextValues): HandlerContext {
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
