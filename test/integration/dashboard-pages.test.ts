// The Overview, Runners and Audit pages in a real browser (chromium, headless) against a real
// control plane with registered runners and jobs: what an operator sees, what clicking does, and
// what an identity without the role sees. Writes docs/dashboard/{overview,runners,audit}.png.
import { sql } from "kysely";
import { beforeAll, describe, expect, it } from "vitest";
import type { Page } from "puppeteer-core";
import { parseRoleGrant } from "../../src/identity/roles.js";
import { jobBody, leasedJob, registeredRunner } from "../support/actors.js";
import { useDashboard, waitForDom } from "../support/browser.js";
import { signInOverHttp, startTestDashboard, testSignInTokenFile } from "../support/dashboard.js";

// The functions passed to page.evaluate/waitForDom run in the page: its globals, declared for
// this (node) program's type check.
interface PageElement {
  readonly textContent: string | null;
  readonly tagName: string;
  readonly className: string;
  readonly scrollWidth: number;
  readonly clientWidth: number;
  querySelector(s: string): PageElement | null;
  closest(s: string): PageElement | null;
  getBoundingClientRect(): { readonly right: number };
}
declare const document: {
  readonly activeElement: PageElement | null;
  querySelector(s: string): PageElement | null;
  querySelectorAll(s: string): Iterable<PageElement> & { length: number };
  readonly documentElement: {
    readonly dataset: Record<string, string | undefined>;
    readonly scrollWidth: number;
  };
  readonly body: unknown;
};
declare function getComputedStyle(e: unknown): {
  readonly backgroundColor: string;
  readonly outlineStyle: string;
};

/**
 * Waits until `selector`'s text is `expected` (the page updates from the event stream), then
 * returns it.
 */
async function textBecomes(page: Page, selector: string, expected: string): Promise<string> {
  await waitForDom(
    page,
    (s, want) => document.querySelector(s)?.textContent?.trim() === want,
    15_000,
    selector,
    expected,
  ).catch(async () => {
    throw new Error(
      `${selector} shows ` +
        `${JSON.stringify(await page.$eval(selector, (e) => e.textContent).catch(() => "(absent)"))}, ` +
        `not ${JSON.stringify(expected)}`,
    );
  });
  return expected;
}

describe("dashboard pages", () => {
  const dash = useDashboard({ grants: [parseRoleGrant("spiffe://forelead/services/reader=read")] });
  const { cp } = dash;

  // The fleet every test looks at: r1 (w1) ran one job to success and holds a second, r2 (w1) is
  // idle, r3 (w2, labels gpu) is idle while w2 has two jobs only a linux runner can take.
  beforeAll(async () => {
    const done = await leasedJob(cp, cp.admin, "r1", "w1");
    const completed = await done.runner.complete(done.jobId, done.token);
    expect(completed.status, completed.text).toBe(200);
    await registeredRunner(cp, "r2", "w1");
    await registeredRunner(cp, "r3", "w2", { labels: ["gpu"] });
    const running = await cp.admin.enqueue({ workspaceId: "w1" });
    expect(running.status, running.text).toBe(200);
    expect((await done.runner.claim()).status).toBe(200);
    for (let i = 0; i < 2; i++)
      expect(
        (await cp.admin.enqueue(jobBody({ workspaceId: "w2", labels: ["linux"] }))).status,
      ).toBe(200);
  });

  it("overview: the fleet's runner and queue numbers, per workspace, updating live as jobs are queued", async () => {
    const p = await dash.newPage();
    await p.open("#/overview");
    await p.page.waitForSelector("[data-stat=runners-registered] .stat-value");
    expect(await textBecomes(p.page, "[data-stat=runners-registered] .stat-value", "3")).toBe("3");
    await textBecomes(p.page, "[data-stat=jobs-queued] .stat-value", "2");
    await textBecomes(p.page, "[data-stat=jobs-running] .stat-value", "1");
    await textBecomes(p.page, "tr[data-workspace=w2] [data-col=queued]", "2");
    await textBecomes(p.page, "[data-stat=settled-24h]", "1 in the last 24 hours");
    await p.page.waitForSelector(".chart canvas");

    // Live: a job queued now shows without a reload (the page follows the event stream).
    expect((await cp.admin.enqueue(jobBody({ workspaceId: "w2", labels: ["linux"] }))).status).toBe(
      200,
    );
    await textBecomes(p.page, "tr[data-workspace=w2] [data-col=queued]", "3");
    await textBecomes(p.page, "[data-stat=jobs-queued] .stat-value", "3");
    await p.page.waitForSelector(".chart canvas");
    await p.screenshot("overview");
    expect(p.errors).toEqual([]);
    // Measured (docs/dashboard.md): from navigation start to the first paint and to the status
    // numbers shown.
    const timing = await p.page.evaluate(() => ({
      fcp: performance.getEntriesByName("first-contentful-paint")[0]?.startTime,
      rendered: performance.getEntriesByName("forelead:overview-rendered")[0]?.startTime,
    }));
    expect(timing.rendered).toBeGreaterThan(0);
    console.log(
      `overview timing: first contentful paint ${timing.fcp?.toFixed(0)} ms, ` +
        `status numbers rendered ${timing.rendered?.toFixed(0)} ms after ` +
        `navigation start`,
    );
  });

  it(
    "runners: ids, leases and labels; pause asks first, then shows the " +
      "runner paused, and the control plane agrees",
    async () => {
      const p = await dash.newPage();
      await p.open("#/runners");
      await p.page.waitForSelector("tr[data-runner=r3]");
      const ids = await p.page.$$eval("tr[data-runner] th code", (els) =>
        els.map((e) => e.textContent),
      );
      expect(ids.sort()).toEqual(["r1", "r2", "r3"]);
      await textBecomes(p.page, "tr[data-runner=r1] [data-col=leases]", "1 / 1");
      await textBecomes(p.page, "tr[data-runner=r1] [data-col=state]", "busy");
      await textBecomes(p.page, "tr[data-runner=r2] [data-col=state]", "idle");
      // A runner silent past the offline threshold shows the control plane's "offline", not idle.
      await registeredRunner(cp, "r-silent", "w9");
      await sql`update runners set last_seen_at = now() - interval '1 hour'
        where runner_id = 'r-silent'`.execute(cp.plane.store.db);
      await p.open("#/runners");
      await textBecomes(p.page, "tr[data-runner=r-silent] [data-col=state]", "offline");

      // "Keep as is" changes nothing.
      await p.page.click('button[aria-label="Pause runner r2 (w1)"]');
      await p.page.waitForSelector("tr[data-runner=r2] dialog[open]");
      await p.page.click("tr[data-runner=r2] dialog[open] [data-confirm=no]");
      expect(await p.page.$("dialog[open]")).toBeNull();
      await textBecomes(p.page, "tr[data-runner=r2] [data-col=state]", "idle");

      await p.page.click('button[aria-label="Pause runner r2 (w1)"]');
      await p.page.waitForSelector("tr[data-runner=r2] dialog[open]");
      await p.page.type("tr[data-runner=r2] dialog[open] input", "disk check");
      await p.page.click("tr[data-runner=r2] dialog[open] [data-confirm=yes]");
      await textBecomes(p.page, "tr[data-runner=r2] [data-col=state]", "paused");
      await p.page.waitForSelector('button[aria-label="Resume runner r2 (w1)"]');

      const st = await cp.admin.rest.request("GET", "/v1/admin/status");
      expect(st.json.runners.paused, st.text).toBe("1");
      const events = await cp.admin.rest.request("GET", "/v1/admin/events?types=runner.paused");
      const paused = events.text
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l) as { runnerId: string; data: { by: string; reason: string } });
      expect(paused).toEqual([
        expect.objectContaining({
          runnerId: "r2",
          data: expect.objectContaining({
            by: "spiffe://forelead/services/test-admin",
            reason: "disk check",
          }),
        }),
      ]);
      await p.screenshot("runners");
      expect(p.errors).toEqual([]);
    },
  );

  it(
    "audit: search by identity and kind finds an action made through the " +
      "dashboard, under the operator's identity",
    async () => {
      // An action through the dashboard's proxy, as its pages make them (Connect JSON, its own
      // Origin).
      const session = await signInOverHttp(dash.dashboard);
      const paused = await fetch(`${dash.url}/api/forelead.admin.v1.FleetService/PauseWorkspace`, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          "connect-protocol-version": "1",
          origin: dash.url,
          ...session,
        },
        body: JSON.stringify({ apiVersion: "v1", workspaceId: "w9", reason: "audit test" }),
      });
      expect(paused.status, await paused.clone().text()).toBe(200);
      const p = await dash.newPage();
      await p.open("#/audit");
      await p.page.waitForSelector("form[role=search]");
      // It opens on the actions and refusals: the pause is there, no routine allow is.
      await p.page.waitForSelector("table.audit tbody tr");
      const first = await p.page.$$eval("table.audit tbody tr", (trs) =>
        trs.map((tr) => [
          tr.querySelector("[data-col=kind]")?.textContent,
          tr.querySelector("[data-col=decision]")?.textContent,
          tr.textContent ?? "",
        ]),
      );
      expect(first.filter(([kind, decision]) => kind !== "action" && decision !== "deny")).toEqual(
        [],
      );
      expect(first.some(([, , text]) => text!.includes("workspace.pause"))).toBe(true);
      expect(await p.page.$eval("select[name=kind]", (s) => s.value)).toBe("notable");
      await p.page.type("input[name=spiffeId]", "spiffe://forelead/services/test-admin");
      await p.page.select("select[name=kind]", "action");
      await p.page.click("form[role=search] button[type=submit]");
      // The search's rows replace the first (unfiltered) page: every row is the operator's, one is
      // the pause of w9.
      const rows = async () =>
        p.page.$$eval("table.audit tbody tr", (trs) =>
          trs.map((tr) => ({
            identity: tr.querySelector("[data-col=identity]")?.textContent,
            text: tr.textContent ?? "",
          })),
        );
      await waitForDom(
        p.page,
        () => {
          const trs = [...document.querySelectorAll("table.audit tbody tr")];
          return (
            trs.length > 0 &&
            trs.every(
              (tr) =>
                tr.querySelector("[data-col=identity]")?.textContent ===
                "spiffe://forelead/services/test-admin",
            ) &&
            trs.some((tr) => tr.textContent?.includes("w9"))
          );
        },
        15_000,
      ).catch(async () => {
        throw new Error(`the audit table shows ${JSON.stringify(await rows())}`);
      });
      expect((await rows()).find((r) => r.text.includes("w9"))?.text).toMatch(/workspace\.pause/);

      await p.page.select("select[name=kind]", "decision");
      await p.page.select("select[name=decision]", "allow");
      await p.page.click("form[role=search] button[type=submit]");
      await waitForDom(
        p.page,
        () => {
          const trs = [...document.querySelectorAll("table.audit tbody tr")];
          return (
            trs.length > 0 &&
            trs.every(
              (tr) =>
                tr.querySelector("[data-col=kind]")?.textContent === "decision" &&
                tr.querySelector("[data-col=decision]")?.textContent === "allow",
            )
          );
        },
        15_000,
      );
      await p.screenshot("audit", { fullPage: false });
      expect(p.errors).toEqual([]);
    },
  );

  it("an identity without the role sees the control plane's refusal in the page", async () => {
    const reader = await dash.dashboardAs(await cp.pki.service("reader"));
    const p = await dash.newPage({ dashboard: reader });
    await p.open("#/runners");
    await p.page.waitForSelector("tr[data-runner=r3]");
    await p.page.click('button[aria-label="Pause runner r3 (w2)"]');
    await p.page.click("tr[data-runner=r3] dialog[open] [data-confirm=yes]");
    await p.page.waitForSelector(".error[data-code=permission_denied]");
    const shown = await p.page.$eval(
      ".error[data-code=permission_denied]",
      (e) => e.textContent ?? "",
    );
    expect(shown).toContain("pause runner r3 (w2): permission_denied");
    await textBecomes(p.page, "tr[data-runner=r3] [data-col=state]", "idle");

    const nobody = await dash.dashboardAs(await cp.pki.service("nobody"));
    const q = await dash.newPage({ dashboard: nobody });
    await q.open("#/overview");
    await q.page.waitForSelector(".error[data-code=permission_denied]");
    expect(await q.page.$eval(".error", (e) => e.textContent)).toMatch(
      /^status: permission_denied /,
    );
  });

  it(
    "the live stream resumes after a dropped connection: an event from while " +
      "it was down still updates the page",
    async () => {
      // A dashboard of its own, restarted on the same port while the page stays open.
      const cert = await cp.pki.service("test-admin");
      const endpoint = {
        baseUrl: cp.url,
        ca: cp.pki.ca.certPem,
        cert: cert.certPem,
        key: cert.keyPem,
      };
      // The same sessions after the restart: the page stays signed in.
      const signInTokenFile = testSignInTokenFile();
      let dashboard = await startTestDashboard({
        listen: { host: "127.0.0.1", port: 0 },
        endpoint,
        signInTokenFile,
      });
      try {
        const p = await dash.newPage({ dashboard });
        await p.open("#/overview");
        await p.page.waitForSelector(".live-live");
        const before = await p.page.$eval("tr[data-workspace=w2] [data-col=queued]", (e) =>
          Number(e.textContent),
        );
        await dashboard.close();
        await p.page.waitForSelector(".live-reconnecting");
        expect(
          (await cp.admin.enqueue(jobBody({ workspaceId: "w2", labels: ["linux"] }))).status,
        ).toBe(200);
        dashboard = await startTestDashboard({
          listen: { host: "127.0.0.1", port: Number(new URL(dashboard.url).port) },
          endpoint,
          signInTokenFile,
          sessions: dashboard.sessions,
        });
        await p.page.waitForSelector(".live-live", { timeout: 20_000 });
        await textBecomes(p.page, "tr[data-workspace=w2] [data-col=queued]", String(before + 1));
      } finally {
        await dashboard.close();
      }
    },
  );

  it("reads at 320 px: the page does not scroll sideways (tables scroll inside their frame)", async () => {
    const p = await dash.newPage({ width: 320 });
    for (const route of ["#/overview", "#/runners", "#/audit"]) {
      await p.open(route);
      await p.page.waitForSelector("main .table-wrap, main .stats, main form");
      const wide = await p.page.evaluate(() =>
        [...document.querySelectorAll("body *")]
          .filter(
            (e) =>
              (e.getBoundingClientRect().right > 321 || e.scrollWidth > e.clientWidth + 1) &&
              !e.closest(".table-wrap"),
          )
          .slice(0, 8)
          .map(
            (e) =>
              `${e.tagName}.${e.className} ` +
              `${Math.round(e.getBoundingClientRect().right)} ` +
              `${e.scrollWidth}/${e.clientWidth}`,
          ),
      );
      expect(
        await p.page.evaluate(() => document.documentElement.scrollWidth),
        `${route}: ${wide.join(", ")}`,
      ).toBeLessThanOrEqual(320);
    }
  });

  it("works by keyboard: a skip link, then the nav with a visible focus ring; Enter follows a link", async () => {
    const p = await dash.newPage();
    await p.open("#/overview");
    const focused = () =>
      p.page.evaluate(() => {
        const e = document.activeElement;
        return { text: e?.textContent?.trim(), outline: e ? getComputedStyle(e).outlineStyle : "" };
      });
    await p.page.keyboard.press("Tab");
    expect((await focused()).text).toBe("Skip to content");
    await p.page.keyboard.press("Tab");
    await p.page.keyboard.press("Tab");
    const runners = await focused();
    expect(runners).toEqual({ text: "Runners", outline: "solid" });
    await p.page.keyboard.press("Enter");
    await textBecomes(p.page, "main h1", "Runners");
    expect(await p.page.$eval('nav a[aria-current="page"]', (e) => e.textContent)).toBe("Runners");
  });

  it("the theme toggle switches to dark and is remembered", async () => {
    const p = await dash.newPage();
    await p.open("#/overview");
    await p.page.click("button.theme");
    expect(await p.page.evaluate(() => document.documentElement.dataset.theme)).toBe("dark");
    await p.open("#/runners");
    expect(await p.page.evaluate(() => document.documentElement.dataset.theme)).toBe("dark");
    expect(await p.page.evaluate(() => getComputedStyle(document.body).backgroundColor)).toBe(
      "rgb(13, 17, 23)",
    );
  });
});
