import { createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { RunnerService } from "../../../gen/forelead/runner/v1/runner_pb.js";
import { SuspendService } from "../../../gen/forelead/runner/v1/suspend_pb.js";
import type { TlsMaterial } from "./rest-transport.js";

/**
 * A generated RunnerService client for the routes the REST client does not
 * carry (code bundles, artifact uploads): Connect over HTTP/2 with the same
 * client certificate as the REST transport.
 */
export interface RunnerProtocol {
  /** The client on the current session; the first call opens it with freshly read TLS material. */
  client(): Promise<Client<typeof RunnerService>>;
  /** The suspend routes (docs/suspend.md) on the same session. */
  suspendClient(): Promise<Client<typeof SuspendService>>;
  /**
   * The next call opens a new session (e.g. with a renewed certificate); calls in flight finish on
   * the old one.
   */
  reconnect(): void;
  /** Ends every session this made. */
  close(): void;
}

/**
 * A protocol client to `baseUrl` whose sessions present the certificate `tls()` gives at the time
 * they open.
 */
export function createRunnerProtocol(
  baseUrl: string,
  tls: () => TlsMaterial | Promise<TlsMaterial>,
): RunnerProtocol {
  let current:
    | Promise<{
        manager: Http2SessionManager;
        client: Client<typeof RunnerService>;
        suspend: Client<typeof SuspendService>;
      }>
    | undefined;
  // Replaced sessions are kept until close: aborting one would break an upload still running on it.
  const managers: Http2SessionManager[] = [];
  let closed = false;
  const open = async () => {
    const { ca, cert, key } = await tls();
    const nodeOptions = { ca, cert, key };
    const manager = new Http2SessionManager(baseUrl, {}, nodeOptions);
    managers.push(manager);
    const transport = createConnectTransport({
      baseUrl,
      httpVersion: "2",
      useBinaryFormat: true,
      nodeOptions,
      sessionManager: manager,
    });
    return {
      manager,
      client: createClient(RunnerService, transport),
      suspend: createClient(SuspendService, transport),
    };
  };
  const session = async () => {
    if (closed) throw new Error("the runner protocol client is closed");
    current ??= open();
    try {
      return await current;
    } catch (err) {
      current = undefined; // unreadable TLS material now may be readable on the next call
      throw err;
    }
  };
  return {
    client: async () => (await session()).client,
    suspendClient: async () => (await session()).suspend,
    reconnect() {
      current = undefined;
    },
    close() {
      closed = true;
      current = undefined;
      for (const manager of managers.splice(0)) manager.abort();
    },
  };
}
