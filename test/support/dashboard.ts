// Dashboards in tests, and signing in to them: a dashboard started with its one-time sign-in
// token in a file of the test's own and its log lines kept; sign-in over plain HTTP(S) (a cookie
// and the CSRF token, for scripted clients) and in a browser page (the sign-in form, as a person
// does it). Every dashboard test signs in through these.
import { randomBytes } from "node:crypto";
import { mkdirSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { request as httpRequest } from "node:http";
import { request as httpsRequest } from "node:https";
import { checkServerIdentity } from "node:tls";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Page } from "puppeteer-core";
import {
  startDashboard,
  type Dashboard,
  type DashboardOptions,
} from "../../src/dashboard/server/server.js";
import { eventually } from "./actors.js";
import type { RestClient } from "./clients.js";
import { followSignIn } from "./oidc.js";

/** A dashboard started by a test, with the lines it logged. */
export interface TestDashboard extends Dashboard {
  readonly log: string[];
}

/** Where tests' token files go: a folder of this test process's own. */
const tokenDir = join(tmpdir(), `forelead-dashboard-tokens-${process.pid}`);

/** A fresh token file path (the dashboard writes it, 0600). */
export function testSignInTokenFile(): string {
  mkdirSync(tokenDir, { recursive: true, mode: 0o700 });
  return join(tokenDir, `${randomBytes(6).toString("hex")}.token`);
}

/**
 * startDashboard with the token in a file of the test's own (unless `signInTokenFile` is given)
 * and its log lines kept in `log`.
 */
export async function startTestDashboard(options: DashboardOptions): Promise<TestDashboard> {
  const log: string[] = [];
  const dashboard = await startDashboard({
    signInTokenFile: testSignInTokenFile(),
    log: (line) => void log.push(line),
    ...options,
  });
  return Object.assign(dashboard, { log });
}

/** The current one-time sign-in token of `dashboard`, read from its file as the operator would. */
export async function readSignInToken(dashboard: Pick<Dashboard, "signInTokenFile">) {
  if (dashboard.signInTokenFile === undefined)
    throw new Error("this dashboard signs in with single sign-on: it has no sign-in token");
  return (await readFile(dashboard.signInTokenFile, "utf8")).trim();
}

/** A reply to {@link call}. */
export interface Reply {
  readonly status: number;
  readonly headers: Record<string, string | string[] | undefined>;
  readonly text: string;
}

/**
 * One HTTP/1.1 request (HTTPS for an https:// `url`, trusting `ca`) with exactly `headers` (Host
 * included when given; the server's certificate is still checked against `url`'s host).
 */
export function call(
  url: string,
  method: string,
  path: string,
  headers: Record<string, string>,
  body?: string,
  ca?: string,
): Promise<Reply> {
  const target = new URL(path, url);
  const request = target.protocol === "https:" ? httpsRequest : httpRequest;
  return new Promise((resolve, reject) => {
    const req = request(
      target,
      {
        method,
        headers,
        setHost: headers.host === undefined,
        ca,
        checkServerIdentity: (_, cert) => checkServerIdentity(target.hostname, cert),
      },
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

/** A session as a scripted client holds it: the Cookie header and the CSRF header. */
export type SessionHeaders = Readonly<Record<"cookie" | "x-forelead-csrf", string>>;

/**
 * Signs in to `dashboard` with the token from its file, as a script would (POST
 * /auth/sign-in/token from the dashboard's own origin); the headers of the session it gets.
 */
export async function signInOverHttp(
  dashboard: Pick<Dashboard, "url" | "signInTokenFile">,
  ca?: string,
): Promise<SessionHeaders> {
  const reply = await call(
    dashboard.url,
    "POST",
    "/auth/sign-in/token",
    { "content-type": "application/json", origin: dashboard.url },
    JSON.stringify({ token: await readSignInToken(dashboard) }),
    ca,
  );
  if (reply.status !== 200) throw new Error(`sign-in refused: ${reply.status} ${reply.text}`);
  const setCookie = String(reply.headers["set-cookie"] ?? "");
  return {
    cookie: setCookie.split(";")[0]!,
    "x-forelead-csrf": (JSON.parse(reply.text) as { csrfToken: string }).csrfToken,
  };
}

/**
 * Opens `dashboard` in `page` and signs in with the token from its file through the sign-in page,
 * unless the browser has a session there already (pages of one browser share cookies); returns
 * when the signed-in shell shows.
 */
export async function signInPage(
  page: Page,
  dashboard: Pick<Dashboard, "url" | "signInTokenFile">,
): Promise<void> {
  await page.goto(`${dashboard.url}/`, { waitUntil: "domcontentloaded" });
  await page.waitForSelector("#sign-in-token, button.sign-out");
  if (await page.$("button.sign-out")) return;
  await page.type("#sign-in-token", await readSignInToken(dashboard));
  await page.click(".sign-in button[type=submit]");
  await page.waitForSelector("button.sign-out");
}

/**
 * Signs `login` in at the provider of a single sign-on dashboard as a script would (GET
 * /auth/sso/start, the provider's forms posted by followSignIn): the URL the provider sends the
 * browser back to, unvisited, and the Cookie header of the browser that started the sign-in.
 */
export async function ssoCallbackUrl(
  dashboard: Pick<Dashboard, "url">,
  login: string,
): Promise<{ back: URL; browser: { cookie: string } }> {
  const start = await call(dashboard.url, "GET", "/auth/sso/start", {});
  if (start.status !== 303) throw new Error(`sso start: ${start.status} ${start.text}`);
  const back = await followSignIn(String(start.headers.location), login, (url) =>
    url.startsWith(dashboard.url),
  );
  return { back, browser: { cookie: String(start.headers["set-cookie"]).split(";")[0]! } };
}

/** Signs `login` in to a single sign-on dashboard as a script would; its session's headers. */
export async function signInWithSsoOverHttp(
  dashboard: Pick<Dashboard, "url">,
  login: string,
): Promise<SessionHeaders> {
  const { back, browser } = await ssoCallbackUrl(dashboard, login);
  const reply = await call(dashboard.url, "GET", `${back.pathname}${back.search}`, browser);
  if (reply.status !== 303) throw new Error(`sso callback: ${reply.status} ${reply.text}`);
  const cookie = [reply.headers["set-cookie"] ?? []].flat()[0]!.split(";")[0]!;
  const session = await call(dashboard.url, "GET", "/auth/session", { cookie });
  return {
    cookie,
    "x-forelead-csrf": (JSON.parse(session.text) as { csrfToken: string }).csrfToken,
  };
}

/**
 * On a single sign-on dashboard's sign-in page: follows "Sign in with SSO" and signs `login` in
 * through the provider's own login and consent pages, as a person does; returns when the
 * provider has sent the browser back to the dashboard.
 */
export async function signInAtProvider(
  page: Page,
  dashboard: Pick<Dashboard, "url">,
  login: string,
): Promise<void> {
  await page.waitForSelector("a.sso");
  await Promise.all([page.waitForNavigation(), page.click("a.sso")]);
  for (let step = 0; step < 5 && !page.url().startsWith(dashboard.url); step++) {
    if (await page.$("input[name=login]")) {
      await page.type("input[name=login]", login);
      await page.type("input[name=password]", "any");
    }
    await Promise.all([page.waitForNavigation(), page.click("button[type=submit]")]);
  }
  if (!page.url().startsWith(dashboard.url))
    throw new Error(`the provider did not send the browser back: ${page.url()}`);
}

/** Opens a single sign-on dashboard and signs `login` in; returns when the shell shows. */
export async function signInPageWithSso(
  page: Page,
  dashboard: Pick<Dashboard, "url">,
  login: string,
): Promise<void> {
  await page.goto(`${dashboard.url}/`, { waitUntil: "domcontentloaded" });
  await signInAtProvider(page, dashboard, login);
  await page.waitForSelector("button.sign-out");
}

/** An audit record as REST lists it. */
type AuditRow = Record<string, string | number>;

/**
 * The sign-in refusals a dashboard reported (action session.sign_in, deny) since `since`, once
 * they add up to `count` (a summary counts the refusals it stands for): the reports are sent
 * after the refusal, best effort, so they are waited for.
 */
export async function reportedRefusals(
  admin: Pick<RestClient, "request">,
  since: Date,
  count: number,
): Promise<AuditRow[]> {
  return eventually(`${count} sign-in refusals in the audit trail`, async () => {
    const reply = await admin.request(
      "GET",
      `/v1/admin/audit?pageSize=200&kind=action&decision=deny&since=${since.toISOString()}`,
    );
    const rows = ((reply.json.records ?? []) as AuditRow[]).filter(
      (r) => r.action === "session.sign_in",
    );
    const total = rows.reduce(
      // The trail folds identical records into one with a count.
      (n, r) =>
        n +
        Number(r.count ?? 1) *
          Number(/(\d+) more sign-ins were refused/.exec(String(r.reason ?? ""))?.[1] ?? 1),
      0,
    );
    return total >= count ? rows : undefined;
  });
}
