import http from "node:http";
import type { AddressInfo } from "node:net";
import type { ResourceStack } from "../resource-stack.js";
import type { Metrics } from "./metrics.js";

/** Where the metrics listener answers. */
export interface MetricsListen {
  readonly host: string;
  /** 0 picks a free port. */
  readonly port: number;
}

/** A listening metrics server. */
export interface MetricsServer {
  /** e.g. http://127.0.0.1:9464 */
  readonly url: string;
  /**
   * False when the address is not a loopback address: anyone who can reach the host can read it.
   */
  readonly loopback: boolean;
}

const paths = ["/metrics", "/healthz", "/readyz"];

/**
 * Serves `/metrics` (Prometheus text format), `/healthz` and `/readyz` over
 * plain HTTP/1.1 (node:http) on `listen`: no TLS and no client certificate,
 * so a Prometheus server or a load balancer's probe can read them; loopback
 * by default (`forelead serve --metrics-listen`). GET and HEAD only. The
 * server is registered on `stack`.
 */
export async function serveMetrics(
  listen: MetricsListen,
  metrics: Metrics,
  stack: ResourceStack,
): Promise<MetricsServer> {
  metrics.collectProcessMetrics();
  const server = http.createServer((req, res) => {
    void answer(req, res, metrics).catch((err: unknown) => {
      console.error(
        `metrics: answering ${req.method} ${req.url} failed: ${(err as Error).message}`,
      );
      if (!res.headersSent)
        reply(
          res,
          req.method,
          500,
          "application/json",
          JSON.stringify({
            code: "internal",
            message: "the metrics could not be collected; see the server log",
          }),
        );
      else res.destroy();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", (err: NodeJS.ErrnoException) =>
      reject(
        new Error(
          `--metrics-listen ${listen.host}:${listen.port}: cannot listen ` +
            `(${err.code ?? err.message})` +
            `${err.code === "EADDRINUSE" ? "; another process uses the port: give another address, or --metrics-listen off" : ""}`,
        ),
      ),
    );
    server.listen(listen.port, listen.host, () => resolve());
  });
  stack.defer("the metrics listener", () => {
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    server.closeAllConnections(); // scrapers keep connections alive; a close must not wait for them
    return closed;
  });
  const { port } = server.address() as AddressInfo;
  const host = listen.host.includes(":") ? `[${listen.host}]` : listen.host;
  return { url: `http://${host}:${port}`, loopback: isLoopback(listen.host) };
}

async function answer(
  req: http.IncomingMessage,
  res: http.ServerResponse,
  metrics: Metrics,
): Promise<void> {
  const path = new URL(req.url ?? "/", "http://metrics.invalid").pathname;
  if (!paths.includes(path)) {
    return reply(
      res,
      req.method,
      404,
      "application/json",
      JSON.stringify({
        code: "not_found",
        message: `no route ${req.method} ${path}; this listener serves GET ${paths.join(", ")}`,
      }),
    );
  }
  if (req.method !== "GET" && req.method !== "HEAD") {
    res.setHeader("allow", "GET, HEAD");
    return reply(
      res,
      req.method,
      405,
      "application/json",
      JSON.stringify({
        code: "unimplemented",
        message: `${req.method} ${path} is not served; use GET or HEAD`,
      }),
    );
  }
  if (path === "/healthz")
    return reply(res, req.method, 200, "application/json", JSON.stringify({ status: "ok" }));
  if (path === "/readyz") {
    const checks = await metrics.readiness();
    const notReady = checks.filter((c) => !c.ok).map((c) => c.name);
    const body = {
      status: notReady.length === 0 ? "ready" : "not_ready",
      notReady: notReady.length ? notReady : undefined,
      checks,
    };
    return reply(
      res,
      req.method,
      notReady.length === 0 ? 200 : 503,
      "application/json",
      JSON.stringify(body),
    );
  }
  reply(res, req.method, 200, metrics.registry.contentType, await metrics.registry.metrics());
}

function reply(
  res: http.ServerResponse,
  method: string | undefined,
  status: number,
  contentType: string,
  body: string,
): void {
  res.writeHead(status, {
    "content-type": contentType,
    "content-length": Buffer.byteLength(body),
    "cache-control": "no-store",
  });
  res.end(method === "HEAD" ? undefined : body);
}

/** 127.0.0.0/8, ::1 and localhost. */
function isLoopback(host: string): boolean {
  return (
    host === "localhost" ||
    host === "::1" ||
    /^127\.\d+\.\d+\.\d+$/.test(host) ||
    /^::ffff:127\./.test(host)
  );
}
