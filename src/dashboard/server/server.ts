import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { Endpoint } from "../../cli/connection.js";
import { defaultAssetsDir, loadAssets } from "./assets.js";
import { checkListen, type ListenAddress } from "./listen.js";
import { createProxy } from "./proxy.js";
import { checkRequest, setSecurityHeaders, writeRefusal } from "./security.js";

/** What the dashboard serves and where it forwards. */
export interface DashboardOptions {
  readonly listen: ListenAddress;
  /** Listen on a non-loopback address (and accept any Host); off by default. */
  readonly allowRemote?: boolean;
  /** The control plane and the operator's certificate (src/cli/connection.ts resolveEndpoint). */
  readonly endpoint: Endpoint;
  /** The built web app; default dist/dashboard/ of this package. */
  readonly assetsDir?: string;
}

/** A running dashboard. */
export interface Dashboard {
  /** Its own origin, e.g. http://127.0.0.1:8080. */
  readonly url: string;
  close(): Promise<void>;
}

/**
 * Serves the web app (GET of its built files) and forwards /api/<Connect
 * path> to the control plane (proxy.ts), behind the Host/Origin check and
 * with the security headers of security.ts on every reply. HTTP/1.1 on the
 * loopback: the browser needs no certificate; the operator's is used
 * between the dashboard and the control plane.
 */
export async function startDashboard(options: DashboardOptions): Promise<Dashboard> {
  const allowRemote = options.allowRemote ?? false;
  checkListen(options.listen, allowRemote);
  const assets = await loadAssets(options.assetsDir ?? defaultAssetsDir());
  const proxy = createProxy(options.endpoint);
  const server: Server = createServer((req, res) => {
    setSecurityHeaders(res);
    const refusal = checkRequest(req, allowRemote);
    if (refusal) {
      writeRefusal(res, refusal);
      return;
    }
    const raw = req.url ?? "/";
    const q = raw.indexOf("?");
    const path = q < 0 ? raw : raw.slice(0, q);
    const query = q < 0 ? "" : raw.slice(q);
    if (path.startsWith("/api/")) {
      proxy.handle(req, res, path, query);
      return;
    }
    if (req.method !== "GET" && req.method !== "HEAD") {
      res.setHeader("Allow", "GET, HEAD");
      writeRefusal(res, {
        status: 405,
        code: "unimplemented",
        message: `dashboard: ${req.method} ${path}: the pages are read with GET; API calls go to /api/`,
      });
      return;
    }
    const asset = assets.get(path === "/" ? "/index.html" : path);
    if (!asset) {
      writeRefusal(res, {
        status: 404,
        code: "not_found",
        message: `dashboard: no page ${path}; open / (pages are addressed as /#/overview, /#/runners, ...)`,
      });
      return;
    }
    res.writeHead(200, {
      "Content-Type": asset.contentType,
      "Content-Length": asset.body.length,
      "Cache-Control": "no-cache",
    });
    res.end(req.method === "HEAD" ? undefined : asset.body);
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.listen.port, options.listen.host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const { address, port, family } = server.address() as AddressInfo;
  const host = family === "IPv6" ? `[${address}]` : address;
  return {
    url: `http://${host}:${port}`,
    async close() {
      proxy.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
