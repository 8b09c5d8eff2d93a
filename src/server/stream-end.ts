import { constants as http2Constants, type ServerHttp2Stream } from "node:http2";

/** How long a reset waits for its stream's END_STREAM to go out; past it (a client not reading its socket) it goes anyway. */
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
