// Issue 43's attack on the dashboard, scripted: a local program that knows the dashboard's port
// and Origin, but has no session, gets nothing; nor does a rebinding page, a wrong or spent sign-in
// token, a forged CSRF token, a cookie replayed after sign-out or a session past its lifetime. The
// dashboards are real (one on loopback over HTTP, one serving HTTPS with --public-host), in front
// of a real control plane; then a person signs in and out in chromium.
import { readdir, stat } from "node:fs/promises";
import { createServer, type AddressInfo } from "node:net";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { createRefusalReports } from "../../src/dashboard/server/refusal-reports.js";
import type { DashboardOptions } from "../../src/dashboard/server/server.js";
import { eventually } from "../support/actors.js";
import { useDashboard } from "../support/browser.js";
import { runnerJobs } from "../support/runner-jobs.js";
import {
  call,
  readSignInToken,
  reportedRefusals,
  signInOverHttp,
  startTestDashboard,
  type Reply,
  type SessionHeaders,
  type TestDashboard,
} from "../support/dashboard.js";

const json = { "content-type": "application/json", "connect-protocol-version": "1" };
const getStatus = "/api/forelead.admin.v1.StatusService/GetStatus";
const publicHost = "dash.forelead.test";

/** Every Connect method in gen/: `/api/<package.Service>/<Method>`, as the proxy would forward. */
async function everyApiPath(): Promise<string[]> {
  const paths: string[] = [];
  const files = (await readdir("gen", { recursive: true })).filter((f) => f.endsWith("_pb.ts"));
  for (const file of files) {
    const module = (await import(join(process.cwd(), "gen", file))) as Record<string, unknown>;
    for (const value of Object.values(module)) {
      const service = value as { kind?: string; typeName: string; methods: { name: string }[] };
      if (service?.kind !== "service") continue;
      for (const m of service.methods) paths.push(`/api/${service.typeName}/${m.name}`);
    }
  }
  return paths;
}

/** Expects the dashboard's own 401: Connect's unauthenticated, saying to sign in. */
function expectNotSignedIn(reply: Reply, what: string): void {
  expect(reply.status, `${what}: ${reply.text}`).toBe(401);
  expect(JSON.parse(reply.text), what).toMatchObject({
    code: "unauthenticated",
    message: expect.stringContaining("dashboard: not signed in"),
  });
}

describe("the dashboard without a session (issue 43's attack)", () => {
  const dash = useDashboard();
  const ca = () => dash.cp.pki.ca.certPem;
  /** The control plane as the test admin. */
  const endpointOf = async () => {
    const cert = await dash.cp.pki.service("test-admin");
    return { baseUrl: dash.cp.url, ca: ca(), cert: cert.certPem, key: cert.keyPem };
  };
  /** A dashboard of the test's own as the test admin, over HTTPS when `tls`. */
  const start = async (options: Partial<DashboardOptions> = {}, tls = false) => {
    return startTestDashboard({
      listen: { host: "127.0.0.1", port: 0 },
      endpoint: await endpointOf(),
      ...(tls
        ? {
            tls: { cert: dash.cp.pki.server.certPem, key: dash.cp.pki.server.keyPem },
            allowRemote: true,
            publicHosts: [publicHost],
          }
        : {}),
      ...options,
    });
  };
  const jobs = runnerJobs(dash.cp, "si");
  let remote: TestDashboard;
  beforeAll(async () => {
    remote = await start({}, true);
    return () => remote.close();
  });

  it(
    "a local program with the dashboard's own Origin gets 401 from every API path and " +
      "from the page's data, with or without a made-up cookie",
    async () => {
      // The issue's own calls first: its curl of GetStatus, and the grant a job made through it.
      const grant = "/api/forelead.admin.v1.AdminService/CreateEnrollmentGrant";
      const paths = [
        getStatus,
        grant,
        ...(await everyApiPath()).filter((p) => p !== getStatus && p !== grant),
      ];
      expect(paths.length).toBeGreaterThan(50);
      expect(new Set(paths).size).toBe(paths.length);
      for (const d of [dash.dashboard, remote]) {
        const port = new URL(d.url).port;
        const forged = {
          cookie: `forelead-session-${port}=AAAA; __Host-forelead-session-${port}=AAAA`,
          "x-forelead-csrf": "AAAA",
        };
        for (const path of paths) {
          for (const extra of [{}, forged]) {
            const reply = await call(
              d.url,
              "POST",
              path,
              { ...json, ...extra, origin: d.url },
              "{}",
              ca(),
            );
            expectNotSignedIn(reply, `${d.url}${path}`);
          }
          // Connect's GET form too.
          const get = await call(
            d.url,
            "GET",
            `${path}?encoding=json&message=%7B%7D`,
            { origin: d.url },
            undefined,
            ca(),
          );
          expectNotSignedIn(get, `GET ${d.url}${path}`);
        }
        // The page itself is the sign-in page (the files it needs hold no data); what the pages
        // read and the rest of the app are refused; so is the session's own data.
        const page = await call(d.url, "GET", "/", {}, undefined, ca());
        expect(page.status).toBe(200);
        expect(page.text).toContain('<script type="module" src="app.js"></script>');
        const chunks = (await readdir("dist/dashboard")).filter((f) => f.startsWith("chunk-"));
        expect(chunks.length).toBeGreaterThan(0);
        for (const chunk of chunks)
          expectNotSignedIn(await call(d.url, "GET", `/${chunk}`, {}, undefined, ca()), chunk);
        expectNotSignedIn(
          await call(d.url, "GET", "/auth/session", {}, undefined, ca()),
          "session",
        );
      }
    },
    120_000,
  );

  it("a rebinding Host is refused with --allow-remote and --public-host, even with a session", async () => {
    const port = new URL(remote.url).port;
    const rebind = (extra: Record<string, string>) =>
      call(
        remote.url,
        "POST",
        getStatus,
        {
          ...json,
          ...extra,
          host: `rebind.evil.example:${port}`,
          // The rebinding page's own origin: the scheme the dashboard serves, the evil name.
          origin: `${new URL(remote.url).protocol}//rebind.evil.example:${port}`,
        },
        "{}",
        ca(),
      );
    // The rebinding page has no session; were it to have one, the Host would still be refused.
    const session = await signInOverHttp(remote, ca()).catch(() => ({}));
    for (const extra of [{}, session]) {
      const rebound = await rebind(extra);
      expect(rebound.status, rebound.text).toBe(403);
      expect(JSON.parse(rebound.text)).toEqual({
        code: "permission_denied",
        message: expect.stringContaining(
          `dashboard: Host "rebind.evil.example:${port}" is not a name of this dashboard`,
        ),
      });
    }
    // The name it was given is answered, from its own https:// origin only.
    const named = { ...json, ...session, host: `${publicHost}:${port}` };
    const ok = await call(
      remote.url,
      "POST",
      getStatus,
      { ...named, origin: `https://${publicHost}:${port}` },
      "{}",
      ca(),
    );
    expect(ok.status, ok.text).toBe(200);
    const plain = await call(
      remote.url,
      "POST",
      getStatus,
      { ...named, origin: `http://${publicHost}:${port}` },
      "{}",
      ca(),
    );
    expect(plain.status).toBe(403);
  });

  it("the session cookie is an opaque random id, HttpOnly and SameSite=Strict; Secure and __Host- over HTTPS", async () => {
    const signIn = async (d: TestDashboard) =>
      call(
        d.url,
        "POST",
        "/auth/sign-in/token",
        { "content-type": "application/json", origin: d.url },
        JSON.stringify({ token: await readSignInToken(d) }),
        ca(),
      );
    const local = await start();
    try {
      const reply = await signIn(local);
      expect(reply.status, reply.text).toBe(200);
      const port = new URL(local.url).port;
      expect(reply.headers["set-cookie"]).toEqual([
        expect.stringMatching(
          new RegExp(
            `^forelead-session-${port}=[A-Za-z0-9_-]{43}; Path=/; HttpOnly; SameSite=Strict$`,
          ),
        ),
      ]);
      const body = JSON.parse(reply.text);
      expect(body).toEqual({
        person: { id: "spiffe://forelead/services/test-admin", via: "sign-in token" },
        csrfToken: expect.stringMatching(/^[A-Za-z0-9_-]{43}$/),
        expiresAt: expect.any(String),
      });
    } finally {
      await local.close();
    }
    const secure = await signIn(remote);
    expect(secure.status).toBe(200);
    expect(secure.headers["set-cookie"]).toEqual([
      expect.stringMatching(
        /^__Host-forelead-session-\d+=[A-Za-z0-9_-]{43}; Path=\/; HttpOnly; SameSite=Strict; Secure$/,
      ),
    ]);
  });

  it("a wrong, used or missing sign-in token is refused, with a line on stderr and an audit record that never hold it", async () => {
    const since = new Date();
    const d = await start();
    try {
      expect((await stat(d.signInTokenFile!)).mode & 0o777).toBe(0o600);
      const post = (body: string, type = "application/json", origin = d.url) =>
        call(d.url, "POST", "/auth/sign-in/token", { "content-type": type, origin }, body);
      const first = await readSignInToken(d);

      const wrong = await post(JSON.stringify({ token: "not-the-token" }));
      expect(wrong.status).toBe(401);
      expect(JSON.parse(wrong.text)).toEqual({
        code: "unauthenticated",
        message:
          "dashboard: that sign-in token is wrong or already used; the current one is in the " +
          "dashboard's token file (forelead dashboard printed its path where it was started)",
      });
      expect(wrong.headers["set-cookie"]).toBeUndefined();
      for (const [body, type] of [
        ["{}", "application/json"],
        ['{"token":""}', "application/json"],
        ["token", "application/json"],
        ["", "application/x-www-form-urlencoded"],
        [first, "text/plain"],
      ] as const) {
        const missing = await post(body, type);
        expect(missing.status, `${type} ${body}`).toBe(400);
        expect(JSON.parse(missing.text).code).toBe("invalid_argument");
      }
      // Another site's page cannot post it (and does not spend it).
      expect(
        (await post(JSON.stringify({ token: first }), undefined, "http://evil.example")).status,
      ).toBe(403);

      // The right one works once (a form works as JSON does); then the file holds the next.
      const good = await post(
        `token=${encodeURIComponent(first)}`,
        "application/x-www-form-urlencoded",
      );
      expect(good.status, good.text).toBe(200);
      const used = await post(JSON.stringify({ token: first }));
      expect(used.status).toBe(401);
      expect(JSON.parse(used.text).message).toContain("wrong or already used");
      const second = await readSignInToken(d);
      expect(second).not.toBe(first);
      expect((await stat(d.signInTokenFile!)).mode & 0o777).toBe(0o600);
      expect((await post(JSON.stringify({ token: second }))).status).toBe(200);

      expect(d.log.filter((l) => l.includes("refused a token sign-in"))).toEqual([
        "forelead dashboard: refused a token sign-in from 127.0.0.1: the token is wrong or already used",
        'forelead dashboard: refused a token sign-in from 127.0.0.1: the body has no "token"',
        'forelead dashboard: refused a token sign-in from 127.0.0.1: the body has no "token"',
        "forelead dashboard: refused a token sign-in from 127.0.0.1: the body is not JSON",
        'forelead dashboard: refused a token sign-in from 127.0.0.1: the body has no "token"',
        'forelead dashboard: refused a token sign-in from 127.0.0.1: send application/json or a form, not "text/plain"',
        "forelead dashboard: refused a token sign-in from 127.0.0.1: the token is wrong or already used",
      ]);
      for (const line of d.log) {
        expect(line).not.toContain(first);
        expect(line).not.toContain(second);
      }
      // Each refusal is a deny record of the operator's identity (the dashboard's certificate),
      // naming where it came from and why, never the token; a burst beyond a few a second is one
      // summary, so the records add up to the 7 refusals.
      const records = await reportedRefusals(dash.cp.admin.rest, since, 7);
      for (const r of records) {
        expect(r).toMatchObject({
          kind: "action",
          decision: "deny",
          spiffeId: "spiffe://forelead/services/test-admin",
          target:
            "a sign-in token sign-in from 127.0.0.1 at the dashboard of " +
            "spiffe://forelead/services/test-admin",
        });
        for (const secret of [first, second, "not-the-token"])
          expect(JSON.stringify(r)).not.toContain(secret);
      }
      expect(records.map((r) => r.reason)).toContain(
        "refused by the dashboard: the token is wrong or already used",
      );
    } finally {
      await d.close();
    }
  });

  it("a flood of refused sign-ins is a few audit records a second and one summary, not a record each", async () => {
    const since = new Date();
    const cert = await dash.cp.pki.service("test-admin");
    const lines: string[] = [];
    const reports = createRefusalReports(
      { baseUrl: dash.cp.url, ca: ca(), cert: cert.certPem, key: cert.keyPem },
      (line) => lines.push(line),
    );
    try {
      // 20 refusals in one go (one tick, so one second): 5 are reported one by one, the other
      // 15 as one summary.
      for (let i = 0; i < 20; i++)
        reports.report({ method: "token", reason: `refusal ${i}`, clientAddress: "127.0.0.9" });
      const records = await reportedRefusals(dash.cp.admin.rest, since, 20);
      expect(lines).toEqual([]);
      expect(records.map((r) => r.reason).sort()).toEqual([
        "refused by the dashboard: 15 more sign-ins were refused within a second (token), " +
          "beyond the 5 reported one by one; the dashboard's stderr has each",
        ...[0, 1, 2, 3, 4].map((i) => `refused by the dashboard: refusal ${i}`),
      ]);
      expect(
        records.every(
          (r) =>
            r.target ===
            "a sign-in token sign-in from 127.0.0.9 at the " +
              "dashboard of spiffe://forelead/services/test-admin",
        ),
      ).toBe(true);
    } finally {
      reports.close();
    }
  });

  it("with the control plane down a refusal is still immediate; the report's failure is a stderr line", async () => {
    // A port nothing listens on: the dashboard's control plane is unreachable.
    const gone = createServer();
    await new Promise<void>((done) => gone.listen(0, "127.0.0.1", done));
    const port = (gone.address() as AddressInfo).port;
    await new Promise<void>((done) => gone.close(() => done()));
    const d = await start({
      endpoint: { ...(await endpointOf()), baseUrl: `https://127.0.0.1:${port}` },
    });
    try {
      const wrong = await call(
        d.url,
        "POST",
        "/auth/sign-in/token",
        { "content-type": "application/json", origin: d.url },
        JSON.stringify({ token: "not-the-token" }),
      );
      expect(wrong.status).toBe(401);
      await eventually("the report's failure on stderr", async () =>
        d.log.find((l) => l.includes("could not record a refused sign-in")),
      );
      expect(d.log).toContain(
        "forelead dashboard: refused a token sign-in from 127.0.0.1: the token is wrong or already used",
      );
      for (const line of d.log) expect(line).not.toContain("not-the-token");
    } finally {
      await d.close();
    }
  });

  it("a state-changing call needs its own session's CSRF token: a forged or missing one is 403", async () => {
    const a = await signInOverHttp(remote, ca());
    const b = await signInOverHttp(remote, ca());
    const post = (headers: Record<string, string>) =>
      call(remote.url, "POST", getStatus, { ...json, origin: remote.url, ...headers }, "{}", ca());
    for (const [what, csrf] of [
      ["forged", "Zm9yZ2VkLWNzcmYtdG9rZW4tb2YtdGhlLXNhbWUtbGVuZ3Ro"],
      ["another session's", b["x-forelead-csrf"]],
      ["empty", ""],
    ] as const) {
      const reply = await post({ cookie: a.cookie, "x-forelead-csrf": csrf });
      expect(reply.status, what).toBe(403);
      expect(JSON.parse(reply.text)).toEqual({
        code: "permission_denied",
        message: expect.stringContaining(
          "needs this session's CSRF token in the x-forelead-csrf header",
        ),
      });
    }
    const missing = await post({ cookie: a.cookie });
    expect(missing.status).toBe(403);
    expect(JSON.parse(missing.text).message).toContain("it was missing");
    expect((await post(a)).status).toBe(200);
    expect((await post(b)).status).toBe(200);
    // Sign-out is a state change too.
    const out = await call(
      remote.url,
      "POST",
      "/auth/sign-out",
      { origin: remote.url, cookie: a.cookie },
      undefined,
      ca(),
    );
    expect(out.status).toBe(403);
    expect((await post(a)).status).toBe(200);
  });

  it("sign-out ends the session: the cookie replayed after it is refused", async () => {
    const s = await signInOverHttp(remote, ca());
    const get = (path: string) =>
      call(remote.url, "GET", path, { cookie: s.cookie }, undefined, ca());
    expect((await get("/auth/session")).status).toBe(200);
    const out = await call(
      remote.url,
      "POST",
      "/auth/sign-out",
      { origin: remote.url, ...s },
      undefined,
      ca(),
    );
    expect(out.status, out.text).toBe(204);
    expect(String(out.headers["set-cookie"])).toMatch(/^__Host-forelead-session-\d+=; Max-Age=0; /);
    expectNotSignedIn(
      await call(remote.url, "POST", getStatus, { ...json, origin: remote.url, ...s }, "{}", ca()),
      "replayed",
    );
    expectNotSignedIn(await get("/auth/session"), "replayed session");
    const again = await call(
      remote.url,
      "POST",
      "/auth/sign-out",
      { origin: remote.url, ...s },
      undefined,
      ca(),
    );
    expect(again.status).toBe(401);
  });

  it("a session past its idle lifetime is refused; so is one past its absolute lifetime, however used", async () => {
    const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));
    const idle = await start({ sessionLifetimes: { idleMs: 2_000, maxMs: 60_000 } });
    const max = await start({ sessionLifetimes: { idleMs: 60_000, maxMs: 3_000 } });
    try {
      const status = (d: TestDashboard, s: SessionHeaders) =>
        call(d.url, "POST", getStatus, { ...json, origin: d.url, ...s }, "{}");
      const live = async (d: TestDashboard, s: SessionHeaders) =>
        (await call(d.url, "GET", "/auth/session", { cookie: s.cookie })).status;
      const i = await signInOverHttp(idle);
      const m = await signInOverHttp(max);
      expect((await status(idle, i)).status).toBe(200);
      expect((await status(max, m)).status).toBe(200);
      await pause(1_000);
      // Used within its idle time: still live (the idle clock starts again).
      expect(await live(idle, i)).toBe(200);
      expect(await live(max, m)).toBe(200);
      await pause(2_300);
      expectNotSignedIn(await status(idle, i), "idle");
      expectNotSignedIn(await status(max, m), "absolute");
    } finally {
      await idle.close();
      await max.close();
    }
  });

  it(
    "a job on a process runner on this host reaches nothing through the dashboard: no admin " +
      "method, and (jobs running as their own uid) not the token file",
    async () => {
      // On the host's network, as the job was: the default --job-network private would
      // not let it reach the dashboard's loopback port at all (runner-isolation.test.ts).
      const { runner, ws } = await jobs.freshRunner("process", { jobNetwork: "host" });
      try {
        // The job: it calls the dashboard as the operator's pages would, for a grant in
        // another workspace and for the status, with the dashboard's own Origin.
        const call = (name: string, path: string, body: string) =>
          `curl -s -o /dev/null -w '${name}:%{http_code}\\n' -X POST "$URL${path}" ` +
          `-H "Origin: $URL" -H 'content-type: application/json' -d '${body}'`;
        const script = [
          `if cat "$TOKEN_FILE" >/dev/null 2>&1; then echo token:read; else echo token:unreadable; fi`,
          call(
            "grant",
            "/api/forelead.admin.v1.AdminService/CreateEnrollmentGrant",
            '{"apiVersion":"v1","workspaceId":"victim"}',
          ),
          call("status", getStatus, '{"apiVersion":"v1"}'),
        ].join("; ");
        const jobId = await jobs.enqueue(ws, "process", {
          argv: ["sh", "-c", script],
          env: { URL: dash.url, TOKEN_FILE: dash.dashboard.signInTokenFile },
        });
        expect((await jobs.settled(jobId)).state).toBe("succeeded");
        const log = (await dash.cp.admin.rest.request("GET", `/v1/admin/jobs/${jobId}/logs`)).text;
        expect(log).toContain("grant:401");
        expect(log).toContain("status:401");
        // As root the process executor runs each job as a uid of its own, which cannot read the
        // operator's 0600 file; as the runner's own user it could (docs/operations.md says so).
        if (process.getuid?.() === 0) expect(log).toContain("token:unreadable");
      } finally {
        await runner.close();
      }
    },
    60_000,
  );

  it("in a browser: the token from the file signs in, the overview shows, sign-out goes back to sign-in", async () => {
    const p = await dash.newPage({ signIn: false });
    await p.page.goto(`${dash.url}/#/overview`, { waitUntil: "domcontentloaded" });
    await p.page.waitForSelector("#sign-in-token");
    expect(await p.page.$("[data-stat]")).toBeNull();
    // A wrong token: the page says so, and stays at sign-in.
    await p.page.type("#sign-in-token", "not-the-token");
    await p.page.click(".sign-in button[type=submit]");
    await p.page.waitForSelector(".sign-in .error");
    expect(await p.page.$eval(".sign-in .error", (e) => e.textContent)).toContain(
      "sign-in refused: that sign-in token is wrong or already used; the current one is in the " +
        "dashboard's token file",
    );
    await p.screenshot("sign-in", { fullPage: false });
    await p.page.type("#sign-in-token", await readSignInToken(dash.dashboard));
    await p.page.click(".sign-in button[type=submit]");
    await p.page.waitForSelector("[data-stat=runners-registered] .stat-value");
    expect(await p.page.$eval("main h1", (e) => e.textContent)).toBe("Overview");
    expect(await p.page.$eval(".person", (e) => e.textContent)).toBe(
      "spiffe://forelead/services/test-admin",
    );
    await p.page.click("button.sign-out");
    await p.page.waitForSelector("#sign-in-token");
    expect(await p.page.$("[data-stat]")).toBeNull();
    // Signed out for good: the next load is the sign-in page again.
    await p.page.reload({ waitUntil: "domcontentloaded" });
    await p.page.waitForSelector("#sign-in-token");
    // No script error (a CSP violation would show here); failed loads (the 401s of signed-out
    // reads, a network change on a busy host) are not the page's errors.
    expect(p.errors.filter((e) => !e.startsWith("Failed to load resource"))).toEqual([]);
  });
});
