// The bare limit for the connections and streams-ingest scenarios: a plain
// Node HTTP/2 TLS 1.3 server with the control plane's certificates, TLS
// options (client certificate requested) and HTTP/2 flow-control windows. A
// GET is answered at once with a fixed JSON body; a POST's body is read and
// discarded, then answered 200 (for gRPC: an empty message and grpc-status 0,
// so a generated client accepts it). No identity check, no audit, no
// database. Run by bench/lib/fork.ts.
import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { serveRequests } from "../lib/fork.js";

let server: http2.Http2SecureServer | undefined;
/** What POST bodies brought since the last "stats" request. */
let received = { requests: 0, bodyBytes: 0 };

/** A gRPC message of zero bytes: the envelope (flags 0, length 0) of an empty response. */
const emptyGrpcMessage = Buffer.alloc(5);

serveRequests(async (m) => {
  if (m.type === "stats") {
    const stats = received;
    received = { requests: 0, bodyBytes: 0 };
    return { type: "stats", ...stats };
  }
  if (m.type !== "start") throw new Error(`unknown request ${m.type}`);
  server = http2.createSecureServer(
    {
      cert: m.certPem as string,
      key: m.keyPem as string,
      ca: m.caPem as string,
      requestCert: true,
      rejectUnauthorized: false,
      minVersion: "TLSv1.3",
      ALPNProtocols: ["h2"],
      allowHTTP1: false,
      // as the control plane (src/server/control-plane.ts)
      settings: { initialWindowSize: 1 << 20 },
    },
    (req, res) => {
      if (req.method !== "POST") {
        res.writeHead(200, { "content-type": "application/json" });
        res.end('{"apiVersion":"v1"}');
        return;
      }
      req.on("data", (c: Buffer) => (received.bodyBytes += c.length));
      req.on("end", () => {
        received.requests++;
        const contentType = req.headers["content-type"] ?? "";
        if (contentType.startsWith("application/grpc")) {
          res.writeHead(200, { "content-type": contentType });
          res.addTrailers({ "grpc-status": "0" });
          res.end(emptyGrpcMessage);
        } else {
          res.writeHead(200, { "content-type": "application/json" });
          res.end("{}");
        }
      });
    },
  );
  // as the control plane
  server.on("session", (s: http2.Http2Session) => s.setLocalWindowSize(4 << 20));
  await new Promise<void>((resolve) => server!.listen(0, "127.0.0.1", resolve));
  return {
    type: "started",
    url: `https://127.0.0.1:${(server.address() as AddressInfo).port}`,
    pid: process.pid,
  };
});
