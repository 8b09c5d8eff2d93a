import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import type { DescMethod, DescService } from "@bufbuild/protobuf";
import { Code, ConnectError, type ContextValues, type HandlerContext } from "@connectrpc/connect";
import type { RouteEntry } from "../routes.js";

/**
 * The handler context of a REST request, as the Connect adapter builds one:
 * protocol "rest", the request's headers (pseudo-headers aside), and a signal
 * that aborts when the client closes the stream before its reply is sent.
 *
 * Built by hand rather than by Connect's createHandlerContext, which copies
 * the headers into a new Headers object, makes two more for the response
 * (a REST reply is written from the route's mapping, never from them), and
 * links two more abort signals (a deadline REST has not) per request. Here
 * the headers are read into a Headers object only when asked for, and the
 * request's URL is kept as parsed (`pathname`, for the guard's audit route).
 */
export class RestContext implements HandlerContext {
  readonly protocolName = "rest";
  readonly requestMethod: string;
  readonly service: DescService;
  readonly method: DescMethod;
  readonly values: ContextValues;
  readonly #req: Http2ServerRequest;
  readonly #url: URL;
  /**
   * Made when the signal is first read: most routes never read it (an AbortController costs ~20 µs
   * here).
   */
  #abort: AbortController | undefined;
  /** Why the request was aborted before its signal was read. */
  #abortedBefore: { readonly reason: unknown } | undefined;
  #requestHeader: Headers | undefined;
  #responseHeader: Headers | undefined;
  #responseTrailer: Headers | undefined;

  constructor(
    req: Http2ServerRequest,
    res: Http2ServerResponse,
    entry: RouteEntry,
    url: URL,
    contextValues: ContextValues,
  ) {
    this.#req = req;
    this.#url = url;
    this.requestMethod = req.method;
    this.service = entry.service;
    this.method = entry.method;
    this.values = contextValues;
    // Every stream closes; only one closed before its reply was sent is a cancel. (Aborting after
    // every reply built an error and ran the abort listeners per request: ~5% of a claim's CPU.)
    // A stream the client resets (RST_STREAM, as a runner's claim abort sends) reports its response
    // as finished when it closes, so the reset is heard as "aborted": without it, a long-poll claim
    // whose client had gone went on waiting and could lease the next job to no one.
    const cancel = () =>
      this.abort(new ConnectError("the client closed the request", Code.Canceled));
    req.once("aborted", cancel);
    req.once("close", () => {
      if (!res.writableFinished) cancel();
    });
  }

  get signal(): AbortSignal {
    if (!this.#abort) {
      this.#abort = new AbortController();
      if (this.#abortedBefore) this.#abort.abort(this.#abortedBefore.reason);
    }
    return this.#abort.signal;
  }

  /** The request path, as parsed once. */
  get pathname(): string {
    return this.#url.pathname;
  }

  get url(): string {
    return this.#url.href;
  }

  timeoutMs(): number | undefined {
    return undefined;
  }

  get requestHeader(): Headers {
    if (!this.#requestHeader) {
      const headers = new Headers();
      for (const [k, v] of Object.entries(this.#req.headers)) {
        if (!k.startsWith(":") && v !== undefined)
          headers.set(k, Array.isArray(v) ? v.join(", ") : String(v));
      }
      this.#requestHeader = headers;
    }
    return this.#requestHeader;
  }

  get responseHeader(): Headers {
    return (this.#responseHeader ??= new Headers());
  }

  get responseTrailer(): Headers {
    return (this.#responseTrailer ??= new Headers());
  }

  /** Aborts the request's signal (the Connect context's abort). */
  abort(reason?: unknown): void {
    if (this.#abort) this.#abort.abort(reason);
    else this.#abortedBefore ??= { reason };
  }
}

/** The path of a request's context: kept by a REST context, parsed from the URL of any other. */
export function requestPath(ctx: HandlerContext): string {
  return ctx instanceof RestContext ? ctx.pathname : new URL(ctx.url).pathname;
}
