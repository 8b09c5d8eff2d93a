import https from "node:https";
import http2 from "node:http2";

/** A GET's answer over plain HTTPS. */
export interface HttpsReply {
  readonly status: number;
  readonly headers: Record<string, string | string[] | undefined>;
  readonly body: string;
  /** "h2" or "http/1.1": what ALPN chose. */
  readonly protocol: string;
}

/**
 * GETs `url` over HTTP/1.1 (node:https) trusting only `caPem`, with no client certificate: the
 * way a cloud fetches an issuer's documents.
 */
export function httpsGet(
  url: string,
  caPem: string,
  headers: Record<string, string> = {},
  method = "GET",
): Promise<HttpsReply> {
  return new Promise((resolve, reject) => {
    const req = https.request(url, { method, ca: caPem, headers, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () =>
        resolve({
          status: res.statusCode ?? 0,
          headers: res.headers,
          body: Buffer.concat(chunks).toString("utf8"),
          protocol: "http/1.1",
        }),
      );
    });
    req.on("error", reject);
    req.end();
  });
}

/** GETs `url` over HTTP/2 trusting only `caPem`, with no client certificate. */
export function h2Get(url: string, caPem: string): Promise<HttpsReply> {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const session = http2.connect(u.origin, { ca: caPem });
    session.on("error", reject);
    const stream = session.request({ ":method": "GET", ":path": u.pathname });
    const chunks: Buffer[] = [];
    let headers: http2.IncomingHttpHeaders = {};
    stream.on("response", (h) => (headers = h));
    stream.on("data", (c: Buffer) => chunks.push(c));
    stream.on("end", () => {
      const protocol = session.alpnProtocol ?? "";
      session.close();
      resolve({
        status: Number(headers[":status"]),
        headers,
        body: Buffer.concat(chunks).toString("utf8"),
        protocol,
      });
    });
    stream.on("error", reject);
    stream.end();
  });
}

/** A fetch for jose's customFetch and openid-client that trusts only `caPem` (HTTP/1.1). */
export function fetchTrusting(caPem: string) {
  return async (url: string): Promise<Response> => {
    const reply = await httpsGet(url, caPem);
    return new Response(reply.body, {
      status: reply.status,
      headers: { "content-type": String(reply.headers["content-type"] ?? "") },
    });
  };
}
