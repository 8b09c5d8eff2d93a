import {
  constants as http2Constants,
  type Http2ServerRequest,
  type Http2ServerResponse,
  type ServerHttp2Stream,
} from "node:http2";

// How a request's HTTP/2 stream ends: the reply goes out whole (END_STREAM) before any reset, a
// body left unread is reset with NO_ERROR and drained, and a reply stream that is gone is noticed.
// The listener arms resetAfterEndStream on every stream (connection-guard.ts); REST uses the rest.

/**
 * The request body's chunks. Stopping early leaves the stream alive (the
 * reply is still to be written) and stops listening, so the rest can be
 * drained once the reply is sent (stopUnreadBody).
 */
export function bodyChunks(req: Http2ServerRequest): AsyncIterable<Buffer> {
  return req.iterator({ destroyOnReturn: false }) as AsyncIterable<Buffer>;
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
export function stopUnreadBody(req: Http2ServerRequest, res: Http2ServerResponse): void {
  const stream = res.stream;
  if (stream.destroyed || stream.closed) return;
  // A body read to its end needs no reset (nghttp2's remoteClose can lag behind it): a reset sent
  // right after a 204 made a Node client drop the reply (an NDJSON stream request read in full).
  if (req.readableEnded) return;
  if (stream.state.remoteClose === 0) stream.close(http2Constants.NGHTTP2_NO_ERROR);
  req.resume();
}

/** Whether the reply's stream is gone (the client left, or it was reset). */
export function streamGone(res: Http2ServerResponse): boolean {
  return res.stream.destroyed || res.stream.closed;
}

/** Resolves once the reply can take more bytes, or once its stream is gone (check streamGone). */
export function drained(res: Http2ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      res.off("drain", done);
      res.stream.off("close", done);
      resolve();
    };
    res.once("drain", done);
    res.stream.once("close", done);
  });
}

/**
 * How long a reset waits for its stream's END_STREAM to go out; past it (a client not reading its
 * socket) it goes anyway.
 */
const maxWaitMs = 2_000;

/**
 * Makes a RST_STREAM(NO_ERROR) on `stream` wait until the reply's END_STREAM
 * frame has been sent. Node queues the reset (ours in stopUnreadBody, or its
 * own for a body never read) as soon as the reply is handed over; nghttp2
 * sends control frames before queued DATA and drops DATA once the stream is
 * reset, so a client saw the reply's headers, then the reset, and no end
 * (RFC 9113 section 8.1 allows the reset only after a complete response;
 * strict clients such as Python httpx lose the reply). Any other reset code
 * is an error and goes at once.
 */
export function resetAfterEndStream(stream: ServerHttp2Stream): void {
  const close = stream.close.bind(stream);
  stream.close = (code = http2Constants.NGHTTP2_NO_ERROR, callback?: () => void) => {
    if (code !== http2Constants.NGHTTP2_NO_ERROR || !stream.writableFinished)
      return close(code, callback);
    const started = Date.now();
    const attempt = () => {
      if (
        stream.destroyed ||
        stream.closed ||
        stream.state.localClose === 1 ||
        Date.now() - started > maxWaitMs
      )
        return close(code, callback);
      setTimeout(attempt, 1);
    };
    attempt();
  };
}
