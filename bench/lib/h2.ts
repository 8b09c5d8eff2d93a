import http2 from "node:http2";
import { createSecureContext, type SecureContext } from "node:tls";

/** A reply: status and the parsed JSON body (undefined when empty). */
interface H2Reply {
  readonly status: number;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  readonly json: any;
}

/** A lean REST client on one HTTP/2 + mTLS connection: what a runner holds. */
export interface H2Client {
  readonly session: http2.ClientHttp2Session;
  post(path: string, body: unknown): Promise<H2Reply>;
  get(path: string): Promise<H2Reply>;
  close(): void;
}

/** TLS material of a client connection. */
export interface H2Tls {
  readonly caPem: string;
  readonly certPem: string;
  readonly keyPem: string;
}

// One TLS context per identity, built once: building it per connection (parsing the key and the CA)
// would cost the client more than the handshake it measures.
const contexts = new Map<string, SecureContext>();

/**
 * Opens a connection and resolves once the TLS handshake is done, so callers
 * can time handshakes and count open sessions. No TLS session is reused:
 * every connection is a full handshake.
 */
export function connectH2(url: string, tls: H2Tls): Promise<H2Client> {
  let secureContext = contexts.get(tls.certPem);
  if (!secureContext) {
    secureContext = createSecureContext({ ca: tls.caPem, cert: tls.certPem, key: tls.keyPem });
    contexts.set(tls.certPem, secureContext);
  }
  const context = secureContext;
  return new Promise((resolve, reject) => {
    const session = http2.connect(url, { secureContext: context });
    const failed = (err: Error) => reject(err);
    session.once("error", failed);
    session.once("connect", () => {
      session.off("error", failed);
      session.on("error", () => {}); // surfaced per request
      resolve(client(session));
    });
  });
}

function client(session: http2.ClientHttp2Session): H2Client {
  const send = (headers: http2.OutgoingHttpHeaders, body: string | undefined) =>
    new Promise<H2Reply>((resolve, reject) => {
      const stream = session.request(headers);
      let status = 0;
      let text = "";
      stream.setEncoding("utf8");
      stream.on("response", (h) => (status = Number(h[":status"])));
      stream.on("data", (c: string) => (text += c));
      stream.on("error", reject);
      stream.on("end", () => {
        try {
          resolve({ status, json: text ? JSON.parse(text) : undefined });
        } catch {
          reject(new Error(`HTTP ${status}: the body is not JSON: ${text.slice(0, 200)}`));
        }
      });
      stream.end(body);
    });
  return {
    session,
    post: (path, body) =>
      send(
        { ":method": "POST", ":path": path, "content-type": "application/json" },
        JSON.stringify(body),
      ),
    get: (path) => send({ ":method": "GET", ":path": path }, undefined),
    close: () => session.destroy(),
  };
}

/**
 * Connects as a runner and registers it (1 slot, label linux), as the bench
 * clients do before they claim or stream; closes the connection and throws
 * when the control plane refuses the registration.
 */
export async function connectRunner(
  url: string,
  caPem: string,
  id: {
    readonly runnerId: string;
    readonly workspaceId: string;
    readonly certPem: string;
    readonly keyPem: string;
  },
): Promise<H2Client> {
  const client = await connectH2(url, { caPem, certPem: id.certPem, keyPem: id.keyPem });
  const reply = await client.post("/v1/runner/register", {
    apiVersion: "v1",
    runnerId: id.runnerId,
    workspaceId: id.workspaceId,
    slots: 1,
    cpu: 2,
    memoryBytes: "1073741824",
    architecture: "amd64",
    labels: ["linux"],
    clockOffsetNs: "0",
  });
  if (reply.status !== 200) {
    client.close();
    throw new Error(`register ${id.runnerId}: HTTP ${reply.status} ${JSON.stringify(reply.json)}`);
  }
  return client;
}
