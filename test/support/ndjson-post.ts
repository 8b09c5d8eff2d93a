import http2 from "node:http2";
import type { NdjsonPost, NdjsonReply } from "../../src/runner/transport/ndjson-post.js";

/**
 * An NdjsonPost over the HTTP/2 session `session()` returns, for a bench client that holds its own
 * session (bench/clients/log-streams.ts). The shipped runner posts through its REST transport
 * instead (RunnerClient.postNdjson, runner/transport/client.ts), which reopens the session when it
 * closes or is replaced.
 */
export function createSessionPost(
  session: () => http2.ClientHttp2Session | Promise<http2.ClientHttp2Session>,
): NdjsonPost {
  return async (path, body, timeoutMs) => {
    const s = await session();
    return new Promise<NdjsonReply>((resolve, reject) => {
      const stream = s.request({
        ":method": "POST",
        ":path": path,
        "content-type": "application/x-ndjson",
      });
      const chunks: Buffer[] = [];
      let headers: http2.IncomingHttpHeaders | undefined;
      const timer = setTimeout(
        () => fail(new Error(`${path}: no reply within ${timeoutMs} ms`)),
        timeoutMs,
      );
      const fail = (err: Error) => {
        clearTimeout(timer);
        if (!stream.closed) stream.close(http2.constants.NGHTTP2_CANCEL);
        reject(err);
      };
      stream.on("response", (h) => (headers = h));
      stream.on("data", (c: Buffer) => chunks.push(c));
      stream.on("error", (err) => fail(err));
      stream.on(
        "close",
        () =>
          headers ||
          fail(new Error(`${path}: the stream closed without a reply (code ${stream.rstCode})`)),
      );
      stream.on("end", () => {
        clearTimeout(timer);
        // A reply before the whole body was sent (a rejected line): stop sending.
        if (!stream.writableFinished) stream.close(http2.constants.NGHTTP2_CANCEL);
        resolve({
          status: Number(headers?.[":status"]),
          headers: headers ?? {},
          text: Buffer.concat(chunks).toString("utf8"),
        });
      });
      stream.end(body);
    });
  };
}
