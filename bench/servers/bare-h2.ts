// The bare limit for the connections scenario: a plain Node HTTP/2 TLS 1.3
// server with the control plane's certificates and TLS options (client
// certificate requested), answering every request with a fixed JSON body. No
// identity check, no audit, no database. Run by bench/lib/fork.ts.
import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { serveRequests } from "../lib/fork.js";

let server: http2.Http2SecureServer | undefined;

serveRequests(async (m) => {
  if (m.type !== "start") throw new Error(`unknown request ${m.type}`);
  server = http2.createSecureServer(
    { cert: m.certPem as string, key: m.keyPem as string, ca: m.caPem as string, requestCert: true, rejectUnauthorized: false, minVersion: "TLSv1.3", ALPNProtocols: ["h2"], allowHTTP1: false },
    (_req, res) => {
      res.writeHead(200, { "content-type": "application/json" });
      res.end('{"apiVersion":"v1"}');
    },
  );
  await new Promise<void>((resolve) => server!.listen(0, "127.0.0.1", resolve));
  return { type: "started", url: `https://127.0.0.1:${(server.address() as AddressInfo).port}`, pid: process.pid };
});
