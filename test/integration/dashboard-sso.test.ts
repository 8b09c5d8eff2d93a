// Single sign-on in the dashboard (issue 43): a real OpenID provider (oidc-provider, on
// localhost: another site than the dashboard on 127.0.0.1, so its redirect back is cross-site and
// the Strict session cookie does not come with it), a real control plane that trusts it, and a
// dashboard whose certificate is only a delegate. People sign in in chromium through the
// provider's own login and consent pages, and act with their own roles.
import { spawn } from "node:child_process";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { sql } from "kysely";
import { beforeAll, describe, expect, it } from "vitest";
import { parseRoleGrant } from "../../src/identity/roles.js";
import type { DashboardOptions } from "../../src/dashboard/server/server.js";
import { useDashboard } from "../support/browser.js";
import { foreleadBin, useCliDir } from "../support/cli-dir.js";
import {
  call,
  reportedRefusals,
  signInAtProvider,
  signInPageWithSso,
  signInWithSsoOverHttp,
  ssoCallbackUrl,
  startTestDashboard,
  type TestDashboard,
} from "../support/dashboard.js";
import { useServiceClients } from "../support/fixture.js";
import { startTestOidcProvider, testSigningKey, type TestOidcProvider } from "../support/oidc.js";

const callback = ["http://127.0.0.1/auth/sso/callback"];
const dashboardClient = {
  clientId: "dashboard",
  secret: "dashboard-secret",
  redirectUris: callback,
};
const otherClient = { clientId: "other-app", secret: "other-secret", redirectUris: callback };
const delegate = "spiffe://forelead/services/dashboard";
// The identity claim is the email: not a SPIFFE segment, so the ID encodes it (docs/operations.md).
const alice = "spiffe://forelead/users/_YWxpY2VAZXhhbXBsZS5jb20";
const carol = "spiffe://forelead/users/_Y2Fyb2xAZXhhbXBsZS5jb20";
const json = { "content-type": "application/json", "connect-protocol-version": "1" };
const cancelJob = "/api/forelead.admin.v1.AdminService/CancelJob";
const getJob = "/api/forelead.admin.v1.AdminService/GetJob";

let provider: TestOidcProvider;
const dash = useDashboard(async () => {
  provider = await startTestOidcProvider({
    clients: [dashboardClient, otherClient],
    key: await testSigningKey(),
    host: "localhost",
  });
  return {
    grants: [
      parseRoleGrant(`${delegate}=delegate`),
      parseRoleGrant(`${alice}=read:w1`),
      parseRoleGrant(`${carol}=admin`),
    ],
    sso: { issuer: provider.issuer, clientId: "dashboard", identityClaim: "email" },
  };
});
const client = useServiceClients(dash.cp);
const cli = useCliDir(dash.cp, "dashboard-sso");

/** A dashboard signing people in at the provider as `sso.clientId`, with the delegate's certificate. */
async function startSsoDashboard(
  sso: { clientId: string; secret: string } = dashboardClient,
  options: Partial<DashboardOptions> = {},
): Promise<TestDashboard> {
  const cert = await dash.cp.pki.service("dashboard");
  return startTestDashboard({
    listen: { host: "127.0.0.1", port: 0 },
    endpoint: {
      baseUrl: dash.cp.url,
      ca: dash.cp.pki.ca.certPem,
      cert: cert.certPem,
      key: cert.keyPem,
    },
    sso: { issuer: provider.issuer, clientId: sso.clientId, clientSecret: sso.secret },
    ...options,
  });
}

let sso: TestDashboard;
let w1Job = "";
beforeAll(async () => {
  sso = await startSsoDashboard();
  w1Job = (await dash.cp.admin.enqueue({ workspaceId: "w1" })).json.job.id as string;
  return async () => {
    await sso.close();
    await provider?.close();
  };
});

const personSessions = async () =>
  (
    await sql<{ n: number }>`select count(*)::int as n from person_sessions`.execute(
      dash.cp.plane.store.db,
    )
  ).rows[0]!.n;

/** The control plane's credential behind a dashboard session cookie (`name=value`). */
const credentialOf = (d: TestDashboard, cookie: string) =>
  d.sessions.lookup(cookie.slice(cookie.indexOf("=") + 1))?.delegation?.onBehalfOf;

describe("single sign-on in the dashboard", () => {
  it(
    "a read:w1 person signs in through the provider's pages, sees w1's job, is refused " +
      "cancel on the page, signs out; the replayed cookie and the ended credential are refused",
    async () => {
      const p = await dash.newPage({ dashboard: sso, signIn: false });
      await p.page.goto(`${sso.url}/`, { waitUntil: "domcontentloaded" });
      await p.page.waitForSelector("a.sso");
      // Only single sign-on is offered: no token field.
      expect(await p.page.$("#sign-in-token")).toBeNull();
      await p.screenshot("sign-in-sso", { fullPage: false });
      await signInPageWithSso(p.page, sso, "alice");
      expect(await p.page.$eval(".person", (e) => e.textContent)).toBe(
        `${alice} (alice@example.com)`,
      );

      await p.open(`#/jobs/${w1Job}`);
      await p.page.waitForSelector("[data-state-badge]");
      await p.page.click(".cancel button[data-action]");
      await p.page.waitForSelector(".cancel dialog[open]");
      await p.page.click(".cancel dialog button[data-confirm=yes]");
      await p.page.waitForSelector(".cancel .error[data-code=permission_denied]");
      expect(await p.page.$eval(".cancel .error", (e) => e.textContent)).toContain(alice);

      const cookie = (await p.page.cookies(sso.url)).find((c) =>
        c.name.startsWith("forelead-session-"),
      )!;
      const replay = { cookie: `${cookie.name}=${cookie.value}` };
      const credential = credentialOf(sso, replay.cookie)!;
      expect(credential).toMatch(/^fps_/);
      await p.page.click("button.sign-out");
      await p.page.waitForSelector("a.sso");

      const session = await call(sso.url, "GET", "/auth/session", replay);
      expect(session.status).toBe(401);
      const api = await call(
        sso.url,
        "POST",
        getJob,
        { ...json, ...replay, origin: sso.url },
        JSON.stringify({ apiVersion: "v1", jobId: w1Job }),
      );
      expect(api.status).toBe(401);
      expect(JSON.parse(api.text).message).toContain("dashboard: not signed in");
      // Sign-out ended the control plane's session too: the credential opens nothing.
      const delegateClient = await client("dashboard");
      const ended = await delegateClient.request("GET", `/v1/admin/jobs/${w1Job}`, undefined, {
        "forelead-on-behalf-of": credential,
      });
      expect(ended.status).toBe(401);
      expect(ended.json.message).toContain(`the session of ${alice} ended at`);
      // Nothing secret in the dashboard's log.
      expect(sso.log.some((l) => l.includes(`${alice} ("alice@example.com") signed in`))).toBe(
        true,
      );
      for (const line of sso.log) expect(line).not.toContain(credential);
      expect(p.errors.filter((e) => !e.startsWith("Failed to load resource"))).toEqual([]);
    },
    60_000,
  );

  it("a session that runs out at the dashboard ends the control plane's session too", async () => {
    const idle = await startSsoDashboard(dashboardClient, {
      sessionLifetimes: { idleMs: 1_000, maxMs: 60_000 },
    });
    try {
      const session = await signInWithSsoOverHttp(idle, "alice");
      const credential = credentialOf(idle, session.cookie)!;
      const delegateClient = await client("dashboard");
      const read = () =>
        delegateClient.request("GET", `/v1/admin/jobs/${w1Job}`, undefined, {
          "forelead-on-behalf-of": credential,
        });
      expect((await read()).status).toBe(200);
      await new Promise((r) => setTimeout(r, 1_300));
      expect((await call(idle.url, "GET", "/auth/session", session)).status).toBe(401);
      // EndSession goes out as the session is dropped; its log line says it is done.
      for (let i = 0; i < 100 && !idle.log.some((l) => l.includes("ran out; ended it")); i++)
        await new Promise((r) => setTimeout(r, 100));
      const after = await read();
      expect(after.status).toBe(401);
      expect(after.json.message).toContain(`the session of ${alice} ended at`);
    } finally {
      await idle.close();
    }
  });

  it("an admin person's cancel through the dashboard is audited with the person and the delegate", async () => {
    const carolSession = await signInWithSsoOverHttp(sso, "carol");
    const job = (await dash.cp.admin.enqueue({ workspaceId: "w1" })).json.job.id as string;
    const cancel = await call(
      sso.url,
      "POST",
      cancelJob,
      { ...json, ...carolSession, origin: sso.url },
      JSON.stringify({ apiVersion: "v1", jobId: job }),
    );
    expect(cancel.status, cancel.text).toBe(200);
    const audit = await dash.cp.admin.rest.request(
      "GET",
      `/v1/admin/audit?pageSize=50&spiffeId=${encodeURIComponent(carol)}`,
    );
    // The decision and the action (the cancel itself) each name the person, the claim she
    // signed in with and the delegate the call came through.
    const records = audit.json.records as Record<string, string>[];
    const named = {
      decision: "allow",
      spiffeId: carol,
      personClaim: "carol@example.com",
      delegate,
    };
    expect(records.find((r) => r.action === "job.cancel")).toMatchObject({
      ...named,
      kind: "action",
      target: `job ${job} in workspace "w1"`,
    });
    expect(
      records.find((r) => r.kind === "decision" && r.route?.endsWith("/CancelJob")),
    ).toMatchObject(named);
  });

  it("a client-sent forelead-on-behalf-of is not forwarded: the session's own person decides", async () => {
    const carolSession = await signInWithSsoOverHttp(sso, "carol");
    const carolCredential = credentialOf(sso, carolSession.cookie)!;
    const aliceSession = await signInWithSsoOverHttp(sso, "alice");
    const cancel = await call(
      sso.url,
      "POST",
      cancelJob,
      {
        ...json,
        ...aliceSession,
        origin: sso.url,
        "forelead-on-behalf-of": carolCredential,
      },
      JSON.stringify({ apiVersion: "v1", jobId: w1Job }),
    );
    expect(cancel.status, cancel.text).toBe(403);
    expect(JSON.parse(cancel.text).message).toContain(alice);
  });

  it(
    "a state that the dashboard did not start, a callback in another browser, a replayed " +
      "callback and a replayed code are refused with a clear message, no session and an audit " +
      "record",
    async () => {
      const since = new Date();
      const before = await personSessions();
      let { back, browser } = await ssoCallbackUrl(sso, "alice");
      const visit = (query: URLSearchParams, headers: Record<string, string> = browser) =>
        call(sso.url, "GET", `/auth/sso/callback?${query}`, headers);
      const unknownState =
        "this sign-in is unknown, expired or already used (its state does not match one the " +
        "dashboard started); sign in again from the dashboard&#39;s page";

      const forged = new URLSearchParams(back.search);
      forged.set("state", "not-the-state");
      const mismatch = await visit(forged);
      expect(mismatch.status).toBe(400);
      expect(mismatch.text).toContain(`sign-in refused:</strong> <span>${unknownState}`);
      expect(mismatch.headers["set-cookie"]).toBeUndefined();

      // The callback URL in a browser that did not start the sign-in (a link someone sent) is
      // refused: it would sign that browser in as someone else. The state is spent.
      const elsewhere = await visit(back.searchParams, {});
      expect(elsewhere.status).toBe(400);
      expect(elsewhere.text).toContain("this sign-in was started in another browser");
      expect(elsewhere.headers["set-cookie"]).toBeUndefined();
      ({ back, browser } = await ssoCallbackUrl(sso, "alice"));

      // The real callback works once; the same URL again finds its state spent.
      const first = await visit(back.searchParams);
      expect(first.status, first.text).toBe(303);
      const replayed = await visit(back.searchParams);
      expect(replayed.status).toBe(400);
      expect(replayed.text).toContain(unknownState);
      expect(replayed.headers["set-cookie"]).toBeUndefined();

      // The used code with the state of a new sign-in: the provider refuses the exchange.
      const code = back.searchParams.get("code")!;
      const start = await call(sso.url, "GET", "/auth/sso/start", {});
      const fresh = new URL(String(start.headers.location)).searchParams.get("state")!;
      const reusedQuery = new URLSearchParams(back.search);
      reusedQuery.set("state", fresh);
      const reused = await visit(reusedQuery, {
        cookie: String(start.headers["set-cookie"]).split(";")[0]!,
      });
      expect(reused.status).toBe(401);
      expect(reused.text).toContain(
        "the sign-in provider refused the authorization code (invalid_grant",
      );
      expect(reused.headers["set-cookie"]).toBeUndefined();

      expect(await personSessions()).toBe(before + 1);
      for (const line of sso.log) expect(line).not.toContain(code);
      expect(sso.log.filter((l) => l.includes("refused a single sign-on")).length).toBe(4);
      // Each is a deny record of the dashboard's (delegate's) identity with where it came from
      // and why; never the code or a state.
      const records = await reportedRefusals(dash.cp.admin.rest, since, 4);
      for (const r of records) {
        expect(r).toMatchObject({
          kind: "action",
          decision: "deny",
          spiffeId: delegate,
          target: `a single sign-on sign-in from 127.0.0.1 at the dashboard of ${delegate}`,
        });
        for (const secret of [code, fresh, back.searchParams.get("state")!, "not-the-state"])
          expect(JSON.stringify(r)).not.toContain(secret);
      }
      const reasons = records.map((r) => String(r.reason)).join("\n");
      expect(reasons).toContain("its state does not match one the dashboard started");
      expect(reasons).toContain("this sign-in was started in another browser");
      expect(reasons).toContain(
        "the sign-in provider refused the authorization code (invalid_grant",
      );
    },
  );

  it("an ID token for another audience is refused by the control plane, and the page says so", async () => {
    const other = await startSsoDashboard(otherClient);
    try {
      const before = await personSessions();
      const p = await dash.newPage({ dashboard: other, signIn: false });
      await p.page.goto(`${other.url}/`, { waitUntil: "domcontentloaded" });
      await signInAtProvider(p.page, other, "alice");
      await p.page.waitForSelector(".sign-in .error");
      expect(await p.page.$eval(".sign-in .error", (e) => e.textContent)).toBe(
        "sign-in refused: the control plane refused the sign-in: the ID token is for audience " +
          '"other-app", not for this client (dashboard)',
      );
      expect(await personSessions()).toBe(before);
      expect((await p.page.cookies(other.url)).length).toBe(0);
      const denied = await dash.cp.admin.rest.request(
        "GET",
        "/v1/admin/audit?pageSize=50&kind=action&decision=deny",
      );
      expect(
        (denied.json.records as Record<string, string>[]).some(
          (r) => r.action === "session.create" && r.reason?.includes('"other-app"'),
        ),
      ).toBe(true);
    } finally {
      await other.close();
    }
  });

  it("the one-time token is off: no token file, the token route refuses, the 401 offers SSO only", async () => {
    expect(sso.signInTokenFile).toBeUndefined();
    const token = await call(
      sso.url,
      "POST",
      "/auth/sign-in/token",
      { "content-type": "application/json", origin: sso.url },
      JSON.stringify({ token: "anything" }),
    );
    expect(token.status).toBe(403);
    expect(JSON.parse(token.text).message).toContain(
      "this dashboard signs people in with single sign-on only",
    );
    expect(token.headers["set-cookie"]).toBeUndefined();
    const session = await call(sso.url, "GET", "/auth/session", {});
    expect(session.status).toBe(401);
    expect(JSON.parse(session.text).signIn).toEqual(["sso"]);
  });

  it(
    "forelead dashboard --sso-* reads the client secret from its file and prints no secret; " +
      "a partial set of the flags is refused",
    async () => {
      const cert = await dash.cp.pki.service("dashboard");
      await writeFile(join(cli.dir(), "dashboard.pem"), cert.certPem);
      await writeFile(join(cli.dir(), "dashboard-key.pem"), cert.keyPem, { mode: 0o600 });
      await writeFile(join(cli.dir(), "client-secret"), `${dashboardClient.secret}\n`, {
        mode: 0o600,
      });
      const connection = ["--server", dash.cp.url, "--ca", "ca.pem"];
      const identity = ["--cert", "dashboard.pem", "--key", "dashboard-key.pem"];
      const partial = await cli.forel([
        "dashboard",
        ...connection,
        ...identity,
        "--sso-issuer",
        provider.issuer,
        "--sso-client-id",
        "dashboard",
      ]);
      expect(partial.code).not.toBe(0);
      expect(partial.stderr).toContain(
        "--sso-issuer, --sso-client-id and --sso-client-secret-file go together",
      );

      const child = spawn(
        process.execPath,
        [
          foreleadBin,
          "dashboard",
          ...connection,
          ...identity,
          "--listen",
          "127.0.0.1:0",
          "--sso-issuer",
          provider.issuer,
          "--sso-client-id",
          "dashboard",
          "--sso-client-secret-file",
          "client-secret",
        ],
        { cwd: cli.dir() },
      );
      let output = "";
      child.stdout.on("data", (d: Buffer) => (output += d.toString()));
      child.stderr.on("data", (d: Buffer) => (output += d.toString()));
      try {
        const url = await new Promise<string>((resolve, reject) => {
          child.once("exit", (code) => reject(new Error(`exited ${code}: ${output}`)));
          child.stdout.on("data", () => {
            const m = /forelead dashboard: (http:\/\/[^/ ]+)\/ \(people sign in with single/.exec(
              output,
            );
            if (m) resolve(m[1]!);
          });
        });
        expect(output).toContain(`register ${url}/auth/sso/callback there`);
        // The secret from the file is the one the provider takes: alice signs in through it.
        const session = await signInWithSsoOverHttp({ url }, "alice");
        const me = await call(url, "GET", "/auth/session", { cookie: session.cookie });
        expect(JSON.parse(me.text).person).toEqual({
          id: alice,
          via: "sso",
          claim: "alice@example.com",
        });
        expect(output).not.toContain(dashboardClient.secret);
        expect(output).not.toContain("sign-in token");
      } finally {
        child.kill();
      }
    },
    60_000,
  );
});
