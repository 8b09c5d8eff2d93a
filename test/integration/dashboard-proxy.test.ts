// The dashboard's proxy over plain HTTP (no browser): it forwards Connect calls to the control
// plane with the operator's certificate, refuses other origins and rebound host names, sets the
// security headers, and `forelead dashboard` refuses a non-loopback listen address.
import { spawn } from "node:child_process";
import { request } from "node:http";
import { createInterface } from "node:readline";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startDashboard, type Dashboard } from "../../src/dashboard/server/server.js";
import { contentSecurityPolicy } from "../../src/dashboard/server/security.js";
import { useCliDir, foreleadBin } from "../support/cli-dir.js";
import { useControlPlane } from "../support/fixture.js";

interface Reply {
  readonly status: number;
  readonly headers: Record<string, string | string[] | undefined>;
  readonly text: string;
}

/** One HTTP/1.1 request with exactly `headers` (Host included when given). */
function call(
  url: string,
  method: string,
  path: string,
  headers: Record<string, string>,
  body?: string,
): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = request(
      new URL(path, url),
      { method, headers, setHost: headers.host === undefined },
      (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (c: string) => (text += c));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text }));
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}

const getStatus = "/api/forelead.admin.v1.StatusService/GetStatus";
const json = { "content-type": "application/json", "connect-protocol-version": "1" };

describe("dashboard proxy", () => {
  const cp = useControlPlane();
  const cli = useCliDir(cp, "dashboard");
  let dashboard: Dashboard;
  beforeAll(async () => {
    const cert = await cp.pki.service("test-admin");
    dashboard = await startDashboard({
      listen: { host: "127.0.0.1", port: 0 },
      endpoint: { baseUrl: cp.url, ca: cp.pki.ca.certPem, cert: cert.certPem, key: cert.keyPem },
    });
  });
  afterAll(async () => {
    await dashboard?.close();
  });

  it("serves the pages with a strict CSP, nosniff and no referrer", async () => {
    const page = await call(dashboard.url, "GET", "/", {});
    expect(page.status).toBe(200);
    expect(page.headers["content-type"]).toBe("text/html; charset=utf-8");
    expect(page.text).toContain('<script type="module" src="app.js"></script>');
    expect(page.headers["content-security-policy"]).toBe(contentSecurityPolicy);
    expect(contentSecurityPolicy).toContain("default-src 'self'");
    expect(contentSecurityPolicy).toContain("style-src 'self'");
    expect(contentSecurityPolicy).toContain("frame-ancestors 'none'");
    expect(contentSecurityPolicy).not.toContain("unsafe");
    expect(page.headers["x-content-type-options"]).toBe("nosniff");
    expect(page.headers["referrer-policy"]).toBe("no-referrer");
    const js = await call(dashboard.url, "GET", "/app.js", {});
    expect(js.status).toBe(200);
    expect(js.headers["content-type"]).toBe("text/javascript; charset=utf-8");
    const missing = await call(dashboard.url, "GET", "/etc/passwd", {});
    expect(missing.status).toBe(404);
    expect(JSON.parse(missing.text)).toEqual({
      code: "not_found",
      message: expect.stringContaining("no page /etc/passwd"),
    });
  });

  it("forwards a Connect call from its own origin with the operator's identity", async () => {
    const reply = await call(
      dashboard.url,
      "POST",
      getStatus,
      { ...json, origin: dashboard.url },
      "{}",
    );
    expect(reply.status, reply.text).toBe(200);
    expect(JSON.parse(reply.text)).toMatchObject({
      apiVersion: "v1",
      database: { reachable: true },
    });
    expect(reply.headers["content-security-policy"]).toBe(contentSecurityPolicy);
    // A browser's same-origin fetch may send Sec-Fetch-Site instead.
    expect(
      (
        await call(
          dashboard.url,
          "POST",
          getStatus,
          { ...json, "sec-fetch-site": "same-origin" },
          "{}",
        )
      ).status,
    ).toBe(200);
    // The control plane's audit trail names the operator, not the dashboard.
    const audit = await cp.admin.rest.request(
      "GET",
      "/v1/admin/audit?kind=decision&spiffeId=spiffe://forelead/services/test-admin",
    );
    expect(
      audit.json.records.some((r: { route: string }) =>
        r.route.includes("StatusService/GetStatus"),
      ),
      audit.text,
    ).toBe(true);
  });

  it(
    "refuses a foreign Origin, a POST that says none, and a Host that is a " +
      "DNS name (403, Connect error JSON)",
    async () => {
      const foreign = await call(
        dashboard.url,
        "POST",
        getStatus,
        { ...json, origin: "http://evil.example" },
        "{}",
      );
      expect(foreign.status).toBe(403);
      expect(foreign.headers["content-type"]).toBe("application/json");
      expect(JSON.parse(foreign.text)).toEqual({
        code: "permission_denied",
        message:
          `dashboard: Origin http://evil.example is not this dashboard's ` +
          `(${dashboard.url}); only its own pages may call it`,
      });
      // Same host, other port: another origin too.
      const port = new URL(dashboard.url).port;
      expect(
        (
          await call(
            dashboard.url,
            "POST",
            getStatus,
            { ...json, origin: `http://127.0.0.1:${Number(port) + 1}` },
            "{}",
          )
        ).status,
      ).toBe(403);

      const anonymous = await call(dashboard.url, "POST", getStatus, json, "{}");
      expect(anonymous.status).toBe(403);
      expect(JSON.parse(anonymous.text).message).toContain("must carry an Origin header");
      expect(
        (
          await call(
            dashboard.url,
            "POST",
            getStatus,
            { ...json, "sec-fetch-site": "cross-site" },
            "{}",
          )
        ).status,
      ).toBe(403);

      const rebound = await call(
        dashboard.url,
        "POST",
        getStatus,
        { ...json, host: `evil.example:${port}`, origin: `http://evil.example:${port}` },
        "{}",
      );
      expect(rebound.status).toBe(403);
      expect(JSON.parse(rebound.text).message).toContain('Host "evil.example:');
      // A page of another origin cannot be read either (GET carries its Origin too when a script
      // fetches it).
      expect(
        (await call(dashboard.url, "GET", "/", { origin: "http://evil.example" })).status,
      ).toBe(403);
    },
  );

  it("forwards only /api/<Service>/<Method>: other paths are 404 (or 405 outside /api/), naming the form", async () => {
    const rest = await call(
      dashboard.url,
      "POST",
      "/v1/admin/status",
      { ...json, origin: dashboard.url },
      "{}",
    );
    expect(rest.status).toBe(405);
    expect(JSON.parse(rest.text).message).toContain("API calls go to /api/");
    const bad = await call(
      dashboard.url,
      "POST",
      "/api/nope",
      { ...json, origin: dashboard.url },
      "{}",
    );
    expect(bad.status).toBe(404);
    expect(JSON.parse(bad.text).message).toContain("/api/<package.Service>/<Method>");
  });

  it("says so when the control plane cannot be reached (502, Connect's unavailable)", async () => {
    const cert = await cp.pki.service("test-admin");
    const down = await startDashboard({
      listen: { host: "127.0.0.1", port: 0 },
      endpoint: {
        baseUrl: "https://127.0.0.1:1",
        ca: cp.pki.ca.certPem,
        cert: cert.certPem,
        key: cert.keyPem,
      },
    });
    try {
      const reply = await call(down.url, "POST", getStatus, { ...json, origin: down.url }, "{}");
      expect(reply.status).toBe(502);
      expect(JSON.parse(reply.text)).toEqual({
        code: "unavailable",
        message: "dashboard: cannot reach the control plane at https://127.0.0.1:1: ECONNREFUSED",
      });
    } finally {
      await down.close();
    }
  });

  it("refuses a non-loopback listen address unless --allow-remote", async () => {
    await expect(
      startDashboard({
        listen: { host: "0.0.0.0", port: 0 },
        endpoint: { baseUrl: cp.url, ca: "", cert: "", key: "" },
      }),
    ).rejects.toThrow(/--listen 0\.0\.0\.0:0 is not a loopback address.*--allow-remote/);
    const refused = await cli.forel(["dashboard", "--listen", "0.0.0.0:8080", ...cli.connection()]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain(
      "forelead: error: --listen 0.0.0.0:8080 is not a loopback address: " +
        "everyone who can reach it would act with your client certificate",
    );
    const garbled = await cli.forel(["dashboard", "--listen", "8080"]);
    expect(garbled.code).toBe(1);
    expect(garbled.stderr).toContain('--listen "8080" is not HOST:PORT; e.g. 127.0.0.1:8080');
  });

  it("forelead dashboard serves and forwards with the connection's certificate", async () => {
    const child = spawn(
      process.execPath,
      [foreleadBin, "dashboard", "--listen", "127.0.0.1:0", ...cli.connection()],
      { cwd: cli.dir(), stdio: ["ignore", "pipe", "pipe"] },
    );
    try {
      const line = await new Promise<string>((resolve, reject) => {
        createInterface({ input: child.stdout! }).once("line", resolve);
        child.once("exit", (code) => reject(new Error(`forelead dashboard exited ${code}`)));
      });
      const url = /^forelead dashboard: (http:\/\/127\.0\.0\.1:\d+)\//.exec(line)?.[1];
      expect(url, line).toBeDefined();
      const reply = await call(url!, "POST", getStatus, { ...json, origin: url! }, "{}");
      expect(reply.status, reply.text).toBe(200);
      expect(JSON.parse(reply.text).database.reachable).toBe(true);
    } finally {
      const exited = new Promise((r) => child.once("exit", r));
      child.kill("SIGTERM");
      await exited;
    }
  });
});
