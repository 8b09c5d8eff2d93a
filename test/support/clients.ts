import http2 from "node:http2";
import type { DescService } from "@bufbuild/protobuf";
import { createClient, type Client, type Transport } from "@connectrpc/connect";
import {
  createConnectTransport,
  createGrpcTransport,
  createGrpcWebTransport,
} from "@connectrpc/connect-node";
import type { IssuedCertificate } from "../../src/identity/ca.js";

/** A reply as the REST client saw it. */
export interface RestReply {
  readonly status: number;
  readonly headers: http2.IncomingHttpHeaders;
  readonly text: string;
  /** The body's bytes, for binary replies (git bundles); set by createRestClient. */
  readonly body?: Buffer;
  /** The body parsed as JSON, or undefined when it is empty or not JSON. */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  readonly json: any;
}

/** A REST client on one HTTP/2 connection (one TLS session), like a runner's. */
export interface RestClient {
  readonly session: http2.ClientHttp2Session;
  request(
    method: string,
    path: string,
    body?: unknown,
    headers?: http2.OutgoingHttpHeaders,
  ): Promise<RestReply>;
  /**
   * POSTs NDJSON: each element is one line (objects are JSON-encoded, strings sent as they are).
   */
  ndjson(path: string, lines: readonly unknown[]): Promise<RestReply>;
  close(): Promise<void>;
}

/** Opens an HTTP/2 + TLS connection with `cert` as the client certificate (none when undefined). */
export function createRestClient(
  url: string,
  caPem: string,
  cert?: Pick<IssuedCertificate, "certPem" | "keyPem">,
): RestClient {
  const session = http2.connect(url, {
    ca: caPem,
    cert: cert?.certPem,
    key: cert?.keyPem,
  });
  session.on("error", () => {}); // surfaced per request instead
  const send = (
    method: string,
    path: string,
    body: string | Buffer | undefined,
    headers: http2.OutgoingHttpHeaders,
  ) =>
    new Promise<RestReply>((resolve, reject) => {
      const stream = session.request({ ":method": method, ":path": path, ...headers });
      const chunks: Buffer[] = [];
      let responseHeaders: http2.IncomingHttpHeaders = {};
      stream.on("response", (h) => (responseHeaders = h));
      stream.on("data", (c: Buffer) => chunks.push(c));
      stream.on("error", reject);
      stream.on("end", () => {
        const bytes = Buffer.concat(chunks);
        const text = bytes.toString("utf8");
        let json: unknown;
        try {
          json = text ? JSON.parse(text) : undefined;
        } catch {
          json = undefined;
        }
        resolve({
          status: Number(responseHeaders[":status"]),
          headers: responseHeaders,
          text,
          body: bytes,
          json,
        });
      });
      stream.end(body);
    });
  return {
    session,
    request(method, path, body, headers = {}) {
      const payload =
        body === undefined
          ? undefined
          : typeof body === "string" || Buffer.isBuffer(body)
            ? body
            : JSON.stringify(body);
      return send(method, path, payload, {
        ...(payload !== undefined ? { "content-type": "application/json" } : {}),
        ...headers,
      });
    },
    ndjson(path, lines) {
      const payload =
        lines.map((l) => (typeof l === "string" ? l : JSON.stringify(l))).join("\n") + "\n";
      return send("POST", path, payload, { "content-type": "application/x-ndjson" });
    },
    close: () =>
      new Promise((resolve) => {
        if (session.destroyed) return resolve();
        session.once("close", () => resolve());
        session.close();
        // A stream the server reset while the client still had body to send keeps a graceful close
        // open.
        setTimeout(() => session.destroy(), 5_000).unref();
      }),
  };
}

/** The generated-client protocols the control plane serves. */
export type RpcProtocol = "connect-json" | "connect-binary" | "grpc" | "grpc-web";

/** All of them, for tests that check every surface answers alike. */
export const rpcProtocols: readonly RpcProtocol[] = [
  "connect-json",
  "connect-binary",
  "grpc",
  "grpc-web",
];

/** A Connect transport over HTTP/2 + mTLS with the given protocol. */
function createTestTransport(
  url: string,
  caPem: string,
  cert: Pick<IssuedCertificate, "certPem" | "keyPem">,
  protocol: RpcProtocol,
): Transport {
  const nodeOptions = { ca: caPem, cert: cert.certPem, key: cert.keyPem };
  switch (protocol) {
    case "connect-json":
      return createConnectTransport({ baseUrl: url, httpVersion: "2", nodeOptions });
    case "connect-binary":
      return createConnectTransport({
        baseUrl: url,
        httpVersion: "2",
        useBinaryFormat: true,
        nodeOptions,
      });
    case "grpc":
      return createGrpcTransport({ baseUrl: url, nodeOptions });
    case "grpc-web":
      return createGrpcWebTransport({
        baseUrl: url,
        httpVersion: "2",
        useBinaryFormat: true,
        nodeOptions,
      });
  }
}

/** A generated client for `service` speaking `protocol`. */
export function createTestClient<S extends DescService>(
  service: S,
  url: string,
  caPem: string,
  cert: Pick<IssuedCertificate, "certPem" | "keyPem">,
  protocol: RpcProtocol,
): Client<S> {
  return createClient(service, createTestTransport(url, caPem, cert, protocol));
}
