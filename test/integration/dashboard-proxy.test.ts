// The dashboard's proxy over plain HTTP (no browser): it forwards Connect calls to the control
// plane with the operator's certificate, refuses other origins and rebound host names, sets the
// security headers, and `forelead dashboard` refuses a non-loopback listen address. Every API call
// here is made with a session (test/support/dashboard.ts); dashboard-sign-in.test.ts holds the
// calls without one.
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import { startDashboard } from "../../src/dashboard/server/server.js";
import { contentSecurityPolicy } from "../../src/dashboard/server/security.js";
import { useCliDir, foreleadBin } from "../support/cli-dir.js";
import {
  call,
  signInOverHttp,
  startTestDashboard,
  type SessionHeaders,
  type TestDashboard,
} from "../support/dashboard.js";
import { useControlPlane } from "../support/fixture.js";
import { eventually } from "../support/actors.js";

const getStatus = "/api/forelead.admin.v1.StatusService/GetStatus";
const json = { "content-type": "application/json", "connect-protocol-version": "1" };

describe("dashboard proxy", () => {
  const cp = useControlPlane();
  const cli = useCliDir(cp, "dashboard");
  let dashboard: TestDashboard;
  let session: SessionHeaders;
  beforeAll(async () => {
    const cert = await cp.pki.service("test-admin");
    dashboard = await startTestDashboard({
      listen: { host: "127.0.0.1", port: 0 },
      endpoint: { baseUrl: cp.url, ca: cp.pki.ca.certPem, cert: cert.certPem, key: cert.keyPem },
    });
    session = await signInOverHttp(dashboard);
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
      { ...json, ...session, origin: dashboard.url },
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
          { ...json, ...session, "sec-fetch-site": "same-origin" },
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
        { ...json, ...session, origin: "http://evil.example" },
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
            { ...json, ...session, origin: `http://127.0.0.1:${Number(port) + 1}` },
            "{}",
          )
        ).status,
      ).toBe(403);

      const anonymous = await call(dashboard.url, "POST", getStatus, { ...json, ...session }, "{}");
      expect(anonymous.status).toBe(403);
      expect(JSON.parse(anonymous.text).message).toContain("must carry an Origin header");
      expect(
        (
          await call(
            dashboard.url,
            "POST",
            getStatus,
            { ...json, ...session, "sec-fetch-site": "cross-site" },
            "{}",
          )
        ).status,
      ).toBe(403);

      const rebound = await call(
        dashboard.url,
        "POST",
        getStatus,
        {
          ...json,
          ...session,
          host: `evil.example:${port}`,
          origin: `http://evil.example:${port}`,
        },
        "{}",
      );
      expect(rebound.status).toBe(403);
      expect(JSON.parse(rebound.text).message).toContain(
        `dashboard: Host "evil.example:${port}" is not a name of this dashboard`,
      );
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
      { ...json, ...session, origin: dashboard.url },
      "{}",
    );
    expect(rest.status).toBe(405);
    expect(JSON.parse(rest.text).message).toContain("API calls go to /api/");
    const bad = await call(
      dashboard.url,
      "POST",
      "/api/nope",
      { ...json, ...session, origin: dashboard.url },
      "{}",
    );
    expect(bad.status).toBe(404);
    expect(JSON.parse(bad.text).message).toContain("/api/<package.Service>/<Method>");
  });

  it("says so when the control plane cannot be reached (502, Connect's unavailable)", async () => {
    const cert = await cp.pki.service("test-admin");
    const down = await startTestDashboard({
      listen: { host: "127.0.0.1", port: 0 },
      endpoint: {
        baseUrl: "https://127.0.0.1:1",
        ca: cp.pki.ca.certPem,
        cert: cert.certPem,
        key: cert.keyPem,
      },
    });
    try {
      const signedIn = await signInOverHttp(down);
      const reply = await call(
        down.url,
        "POST",
        getStatus,
        { ...json, ...signedIn, origin: down.url },
        "{}",
      );
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
      "forelead: error: --listen 0.0.0.0:8080 is not a loopback address: other machines " +
        "could reach the dashboard",
    );
    const unnamed = await cli.forel([
      "dashboard",
      "--listen",
      "0.0.0.0:0",
      "--allow-remote",
      ...cli.connection(),
    ]);
    expect(unnamed.code).toBe(1);
    expect(unnamed.stderr).toContain(
      "forelead: error: --allow-remote needs the names the dashboard is reached by: add " +
        "--public-host NAME",
    );
    const plain = await cli.forel([
      "dashboard",
      "--listen",
      "0.0.0.0:0",
      "--allow-remote",
      "--public-host",
      "dash.example.com",
      ...cli.connection(),
    ]);
    expect(plain.code).toBe(1);
    expect(plain.stderr).toContain(
      "forelead: error: a dashboard reached from other machines (--allow-remote) must use " +
        "HTTPS: give --tls-cert and --tls-key, or --behind-tls-proxy",
    );
    const garbled = await cli.forel(["dashboard", "--listen", "8080"]);
    expect(garbled.code).toBe(1);
    expect(garbled.stderr).toContain('--listen "8080" is not HOST:PORT; e.g. 127.0.0.1:8080');
  });

  it("forelead dashboard serves and forwards with the connection's certificate", async () => {
    const child = spawn(
      process.execPath,
      [
        foreleadBin,
        "dashboard",
        "--listen",
        "127.0.0.1:0",
        "--sign-in-token-file",
        "sign-in.token",
        ...cli.connection(),
      ],
      { cwd: cli.dir(), stdio: ["ignore", "pipe", "pipe"] },
    );
    try {
      const lines: string[] = [];
      let stderr = "";
      child.stderr!.setEncoding("utf8").on("data", (c: string) => (stderr += c));
      await new Promise<void>((resolve, reject) => {
        createInterface({ input: child.stdout! }).on("line", (line) => {
          if (lines.push(line) === 2) resolve();
        });
        child.once("exit", (code) => reject(new Error(`forelead dashboard exited ${code}`)));
      });
      const url = /^forelead dashboard: (http:\/\/127\.0\.0\.1:\d+)\//.exec(lines[0]!)?.[1];
      expect(url, lines[0]).toBeDefined();
      // The token is in the file (0600), named on the terminal; stdout is not a terminal here, so
      // the token itself is not printed.
      const tokenFile = join(cli.dir(), "sign-in.token");
      expect(lines[1]).toBe(
        `forelead dashboard: sign in with the one-time token in ${tokenFile} (a new one is ` +
          `written there after each sign-in)`,
      );
      expect((await stat(tokenFile)).mode & 0o777).toBe(0o600);
      const token = (await readFile(tokenFile, "utf8")).trim();
      expect(token).toMatch(/^[A-Za-z0-9_-]{43}$/);
      const signedIn = await signInOverHttp({ url: url!, signInTokenFile: tokenFile });
      const reply = await call(
        url!,
        "POST",
        getStatus,
        { ...json, ...signedIn, origin: url! },
        "{}",
      );
      expect(reply.status, reply.text).toBe(200);
      expect(JSON.parse(reply.text).database.reachable).toBe(true);
      // The sign-in is logged, without the token; the spent token is replaced in the file.
      await eventually("the sign-in's log line", async () =>
        stderr.includes("signed in from") ? true : undefined,
      );
      expect(stderr).toContain(
        "forelead dashboard: spiffe://forelead/services/test-admin signed in from 127.0.0.1 " +
          "(sign-in token)",
      );
      for (const text of [stderr, lines.join("\n")]) expect(text).not.toContain(token);
      expect((await readFile(tokenFile, "utf8")).trim()).not.toBe(token);
    } finally {
      const exited = new Promise((r) => child.once("exit", r));
      child.kill("SIGTERM");
      await exited;
    }
  });

  it("on a terminal the command shows the sign-in token too, the one in the file", async () => {
    // script(1) gives the command a terminal for its standard output.
    const command = [
      process.execPath,
      foreleadBin,
      "dashboard",
      "--listen",
      "127.0.0.1:0",
      "--sign-in-token-file",
      "tty.token",
      ...cli.connection(),
    ].join(" ");
    const child = spawn("script", ["-qfec", command, "/dev/null"], {
      cwd: cli.dir(),
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
    });
    try {
      const shown = await new Promise<string>((resolve, reject) => {
        createInterface({ input: child.stdout! }).on("line", (line) => {
          const m = /^forelead dashboard: sign-in token: (\S+)/.exec(line);
          if (m) resolve(m[1]!);
        });
        child.once("exit", (code) => reject(new Error(`script exited ${code}`)));
      });
      expect(shown).toBe((await readFile(join(cli.dir(), "tty.token"), "utf8")).trim());
    } finally {
      const exited = new Promise((r) => child.once("exit", r));
      process.kill(-child.pid!, "SIGTERM");
      await exited;
    }
  });
});
