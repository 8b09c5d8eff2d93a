// Browser tests of the dashboard: a real control plane (useControlPlane), the dashboard's proxy
// (src/dashboard/server, in this process) holding a client certificate, and Debian's chromium
// driven headless by puppeteer-core (no downloaded browser). Every page signs in first, with the
// dashboard's one-time token from its file (test/support/dashboard.ts). The pages are the built ones
// (dist/dashboard/, which vitest's globalSetup builds from the sources under test).
import { mkdir } from "node:fs/promises";
import { afterAll, beforeAll } from "vitest";
import puppeteer, { type Browser, type EvaluateFunc, type Page } from "puppeteer-core";
import type { Dashboard } from "../../src/dashboard/server/server.js";
import type { IssuedCertificate } from "../../src/identity/ca.js";
import { signInPage, startTestDashboard, type TestDashboard } from "./dashboard.js";
import {
  useControlPlane,
  type ControlPlaneFixture,
  type ControlPlaneFixtureOptions,
} from "./fixture.js";

/** Where Debian's chromium package puts the browser; CI installs it (.ci/run). */
const chromiumPath = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";

/**
 * Waits until `predicate` holds in `page`, checking it again on every change to the page's DOM.
 * Puppeteer's default checks on requestAnimationFrame, which never fires in a page that is not in
 * front (its document is hidden): with two pages open, a wait on the one behind passed only if its
 * first check did, and otherwise waited out its timeout (CI at 12c6f49, dashboard-jobs' cancel).
 */
export async function waitForDom<Params extends unknown[]>(
  page: Page,
  predicate: string | EvaluateFunc<Params>,
  timeout: number,
  ...args: Params
): Promise<void> {
  await page.waitForFunction(predicate, { polling: "mutation", timeout }, ...args);
}

/** A page of the dashboard with what the test needs around it. */
export interface DashboardPage {
  readonly page: Page;
  /** Opens `route` (e.g. "#/runners") and waits until the page's <h1> is there. */
  open(route: string): Promise<void>;
  /** Errors the page logged or threw (CSP violations show here): a test asserts it stays empty. */
  readonly errors: string[];
  /** Writes a screenshot to docs/dashboard/<name>.png (the whole page, or only the viewport). */
  screenshot(name: string, options?: { fullPage?: boolean }): Promise<void>;
  close(): Promise<void>;
}

/** A test file's control plane, its dashboard (as the test admin) and a browser. */
export interface DashboardFixture {
  readonly cp: ControlPlaneFixture;
  /** The admin dashboard's origin, e.g. http://127.0.0.1:41234. */
  readonly url: string;
  /** The admin dashboard (its token file, its log). */
  readonly dashboard: TestDashboard;
  /**
   * A new page (1280x900, light theme unless `dark`), signed in to `dashboard` (default the admin
   * dashboard) unless `signIn` is false.
   */
  newPage(options?: {
    dashboard?: Pick<Dashboard, "url" | "signInTokenFile">;
    width?: number;
    dark?: boolean;
    signIn?: boolean;
  }): Promise<DashboardPage>;
  /**
   * Another dashboard acting as `certificate` (closed in afterAll): to test what a lesser identity
   * sees.
   */
  dashboardAs(certificate: IssuedCertificate): Promise<TestDashboard>;
}

/**
 * Starts the control plane (useControlPlane(options)), a dashboard with the test admin's
 * certificate, and chromium; closes all in afterAll.
 */
export function useDashboard(options: ControlPlaneFixtureOptions = {}): DashboardFixture {
  const cp = useControlPlane(options);
  const dashboards: Dashboard[] = [];
  const pages: DashboardPage[] = [];
  let browser: Browser | undefined;
  let admin: TestDashboard | undefined;
  const dashboardAs = async (certificate: IssuedCertificate) => {
    const d = await startTestDashboard({
      listen: { host: "127.0.0.1", port: 0 },
      endpoint: {
        baseUrl: cp.url,
        ca: cp.pki.ca.certPem,
        cert: certificate.certPem,
        key: certificate.keyPem,
      },
    });
    dashboards.push(d);
    return d;
  };
  beforeAll(async () => {
    admin = await dashboardAs(await cp.pki.service("test-admin"));
    browser = await puppeteer.launch({
      executablePath: chromiumPath,
      headless: true,
      // As root (CI containers) chromium's sandbox cannot start.
      args: [
        ...(process.getuid?.() === 0 ? ["--no-sandbox"] : []),
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--font-render-hinting=none",
      ],
    });
  });
  afterAll(async () => {
    for (const p of pages.splice(0)) await p.close().catch(() => undefined);
    await browser?.close();
    for (const d of dashboards.splice(0)) await d.close();
  });
  const running = () => {
    if (!admin)
      throw new Error("the dashboard is not running: useDashboard() starts it in beforeAll");
    return admin;
  };
  return {
    cp,
    get url() {
      return running().url;
    },
    get dashboard() {
      return running();
    },
    dashboardAs,
    async newPage(opts = {}) {
      if (!browser || !admin)
        throw new Error("the browser is not running: useDashboard() starts it in beforeAll");
      const page = await browser.newPage();
      const errors: string[] = [];
      page.on("pageerror", (err) => errors.push(String(err)));
      page.on("console", (msg) => {
        if (msg.type() === "error") errors.push(msg.text());
      });
      await page.setViewport({ width: opts.width ?? 1280, height: 900 });
      await page.emulateMediaFeatures([
        { name: "prefers-color-scheme", value: opts.dark ? "dark" : "light" },
      ]);
      const target = opts.dashboard ?? admin;
      const base = target.url;
      const handle: DashboardPage = {
        page,
        errors,
        async open(route) {
          await page.goto(`${base}/${route}`, { waitUntil: "domcontentloaded" });
          await page.waitForSelector("main h1");
        },
        async screenshot(name, options = {}) {
          await mkdir("docs/dashboard", { recursive: true });
          await page.screenshot({
            path: `docs/dashboard/${name}.png`,
            fullPage: options.fullPage ?? true,
          });
        },
        close: () => page.close(),
      };
      pages.push(handle);
      if (opts.signIn === false) return handle;
      await signInPage(page, target);
      // The sign-in page's first look (GET /auth/session: 401) is logged by chromium as a failed
      // load: not an error of the page.
      errors.length = 0;
      return handle;
    },
  };
}
