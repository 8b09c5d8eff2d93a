// The dashboard's jobs, job and events pages in a real browser (test/support/browser.ts: headless
// Debian chromium, the dashboard's proxy, a real control plane), with a real runner agent running
// real jobs. What is asserted is what a person sees: job ids and states, a queued job's waiting
// reason, a log line appearing while its job runs, a cancel and its refusal, a new event.
import { chmod, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Dashboard } from "../../src/dashboard/server/server.js";
import { parseRoleGrant } from "../../src/identity/roles.js";
import { eventually } from "../support/actors.js";
import { useDashboard, waitForDom, type DashboardPage } from "../support/browser.js";
import { startTestDashboard, testSignInTokenFile } from "../support/dashboard.js";
import { runnerJobs } from "../support/runner-jobs.js";
import { startTestRunner, type TestRunner } from "../support/runner-agent.js";

// Leases of 6 s: a renewal (every ~2 s) carries a cancel to the runner within seconds.
const dash = useDashboard({
  leaseSeconds: 6,
  grants: [parseRoleGrant("spiffe://forelead/services/dash-reader=read:dj1")],
});
const jobs = runnerJobs(dash.cp, "dj");
let runner: TestRunner;
let ws: string;
let dir: string;

beforeAll(async () => {
  ws = "dj1";
  // Samples every 250 ms: the job page charts them as they come.
  runner = await startTestRunner(dash.cp, {
    runnerId: `dj1-${Math.random().toString(36).slice(2, 8)}`,
    workspaceId: ws,
    executor: "process",
    slots: 2,
    sampleIntervalMs: 250,
  });
  dir = await mkdtemp(join(tmpdir(), "forelead-dash-"));
  // A job may run as a user of its own (the process executor as root): it must see the gate.
  await chmod(dir, 0o755);
});
afterAll(async () => {
  // Open the gate of a job a failed test left waiting, so the runner can close.
  if (dir)
    for (const gate of ["go", "one", "two", "progress-go"]) await writeFile(join(dir, gate), "");
  await runner?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** The text of the job page's log. */
const logText = (p: DashboardPage) =>
  p.page.$eval(".log", (e) => e.textContent ?? "").catch(() => "");

/** Waits until the page shows `selector` holding `text`. */
async function shows(p: DashboardPage, selector: string, text: string): Promise<void> {
  // A string: it runs in the page, where the DOM is (this file is typed for node).
  const found =
    `[...document.querySelectorAll(${JSON.stringify(selector)})].some((e) => ` +
    `(e.textContent ?? "").includes(${JSON.stringify(text)}))`;
  await waitForDom(p.page, found, 20_000).catch(async (err: Error) => {
    // Say what the page showed instead, and what it logged.
    const seen = await p.page.evaluate(`document.querySelector("main")?.innerText`).catch(() => "");
    throw new Error(
      `the page shows no ${selector} with ${JSON.stringify(text)} ` +
        `(${err.message}); it shows:\n${String(seen)}\nerrors: ` +
        `${JSON.stringify(p.errors)}`,
    );
  });
}

describe("the job page", () => {
  it(
    "shows a log line as the job prints it, while the job still runs, then " +
      "the rest once it goes on, coloured and never as markup",
    async () => {
      const gate = join(dir, "go");
      const script = [
        "echo 'first line'",
        `echo '<img src=x onerror="window.pwned=1"><b>bold?</b>'`,
        `while [ ! -e "$GATE" ]; do sleep 0.05; done`,
        "printf '\\033[32msecond line\\033[0m\\n'",
      ].join("; ");
      const jobId = await jobs.enqueue(ws, "process", {
        argv: ["sh", "-c", script],
        env: { GATE: gate },
      });
      const p = await dash.newPage();
      await p.open(`#/jobs/${jobId}`);
      await shows(p, ".log", "first line");
      // The job is blocked on the gate: it is running, and the line after the gate is not there.
      await shows(p, "[data-state-badge]", "running");
      await shows(p, "[data-runner]", runner.client.runnerId);
      expect(await logText(p)).not.toContain("second line");
      // The hostile line is text: no element came out of it, no handler ran.
      await shows(p, ".log", '<img src=x onerror="window.pwned=1"><b>bold?</b>');
      expect(await p.page.$$eval(".log img, .log b, .log script", (e) => e.length)).toBe(0);
      expect(await p.page.evaluate("window.pwned")).toBeUndefined();

      // Resource samples arrive on the job's events stream while it runs; the chart shows them.
      await p.page.waitForSelector("[data-samples] ~ .chart canvas");
      await writeFile(gate, "");
      await shows(p, ".log", "second line");
      expect(await p.page.$eval(".log .ansi-green-fg", (e) => e.textContent)).toBe("second line");
      // The job's end comes through the event stream: state, timeline and attempt update in place.
      await shows(p, "[data-state-badge]", "succeeded");
      await shows(p, ".timeline", "exited");
      await shows(p, ".attempts", "exit 0");
      await shows(p, ".follow", "complete");
      expect(await logText(p)).toBe(
        `first line\n<img src=x onerror="window.pwned=1"><b>bold?</b>\nsecond line\n`,
      );
      await p.screenshot("job");
      expect(p.errors).toEqual([]);
      // Each open page holds its streams (HTTP/1.1: six connections an origin in chromium).
      await p.close();
    },
    90_000,
  );

  it(
    "shows the job's progress as a bar while it runs and its result JSON once it " +
      "settles; folds a run of one event type into one row and shows only the newest rows",
    async () => {
      const gate = join(dir, "progress-go");
      const events = (line: string) => `echo '${line}' >> "$FORELEAD_EVENTS"`;
      const script = [
        `i=0; while [ $i -lt 30 ]; do ${events('{"type":"test.tick"}')}; i=$((i+1)); done`,
        `i=0; while [ $i -lt 40 ]; do ${events('{"type":"test.a"}')}; ` +
          `${events('{"type":"test.b"}')}; i=$((i+1)); done`,
        "echo '::forelead::progress 3/10'",
        `while [ ! -e "$GATE" ]; do sleep 0.05; done`,
        `echo '::forelead::result {"coverage":81.5,"note":"<b>bold?</b>"}'`,
      ].join("; ");
      const jobId = await jobs.enqueue(ws, "process", {
        argv: ["sh", "-c", script],
        env: { GATE: gate },
      });
      const p = await dash.newPage();
      await p.open(`#/jobs/${jobId}`);
      await shows(p, "[data-progress]", "3/10 (30%)");
      expect(await p.page.$eval(".job-progress progress", (e) => e.value)).toBe(30);
      // 30 test.tick, then 80 alternating rows: 81 rows in all, the newest 50 shown.
      await shows(p, ".events-more", "Showing the newest 50 of");
      const rows = () => p.page.$$eval(".job-events tbody tr", (r) => r.length);
      expect(await rows()).toBe(50);
      expect(await p.page.$("tr[data-event-type='test.tick']")).toBeNull();
      await p.page.click("[data-show-all-events]");
      await p.page.waitForSelector("tr[data-event-type='test.tick']");
      expect(
        await p.page.$eval("tr[data-event-type='test.tick']", (r) => [
          r.getAttribute("data-count"),
          r.querySelector("td[data-label='type']")?.textContent,
        ]),
      ).toEqual(["30", "test.tick ×30"]);
      expect(await rows()).toBeGreaterThan(80);
      await writeFile(gate, "");
      await shows(p, "[data-state-badge]", "succeeded");
      await shows(p, "[data-result]", '"coverage": 81.5');
      // The result is text: the markup in it made no element.
      await shows(p, "[data-result]", '"note": "<b>bold?</b>"');
      expect(await p.page.$$eval("[data-result] b", (e) => e.length)).toBe(0);
      await shows(p, "[data-progress]", "3/10 (30%)");
      await p.page.$eval("#progress-title", (e) => e.scrollIntoView());
      await p.screenshot("job-progress", { fullPage: false });
      expect(p.errors).toEqual([]);
      await p.close();
    },
    90_000,
  );

  it("resumes the log after its connection drops, with no line shown twice and none lost", async () => {
    const [one, two] = [join(dir, "one"), join(dir, "two")];
    const script =
      `echo 'line one'; while [ ! -e "$ONE" ]; do sleep 0.05; done; echo 'line ` +
      `two'; while [ ! -e "$TWO" ]; do sleep 0.05; done; echo 'line three'`;
    const jobId = await jobs.enqueue(ws, "process", {
      argv: ["sh", "-c", script],
      env: { ONE: one, TWO: two },
    });
    // A dashboard of this test's own, to stop and start again on the same port (with the same
    // sessions, so that the page stays signed in).
    const admin = await dash.cp.pki.service("test-admin");
    const signInTokenFile = testSignInTokenFile();
    const kept: { sessions?: Dashboard["sessions"] } = {};
    const start = (port: number) =>
      startTestDashboard({
        listen: { host: "127.0.0.1", port },
        signInTokenFile,
        sessions: kept.sessions,
        endpoint: {
          baseUrl: dash.cp.url,
          ca: dash.cp.pki.ca.certPem,
          cert: admin.certPem,
          key: admin.keyPem,
        },
      });
    let proxy = await start(0);
    kept.sessions = proxy.sessions;
    const port = Number(new URL(proxy.url).port);
    try {
      const p = await dash.newPage({ dashboard: proxy });
      await p.open(`#/jobs/${jobId}`);
      await shows(p, ".log", "line one");
      // The dashboard goes away: the log's stream breaks and the page says it is reconnecting.
      await proxy.close();
      await shows(p, ".log-card .follow", "reconnecting");
      // Meanwhile the job goes on: its next line is stored while the page cannot read it.
      await writeFile(one, "");
      await eventually("line two to be stored", async () =>
        (await dash.cp.admin.rest.request("GET", `/v1/admin/jobs/${jobId}/logs`)).text.includes(
          "line two",
        )
          ? true
          : undefined,
      );
      expect(await logText(p)).toBe("line one\n");
      proxy = await start(port);
      await shows(p, ".log", "line two");
      await writeFile(two, "");
      await shows(p, ".log-card .follow", "complete");
      expect(await logText(p)).toBe("line one\nline two\nline three\n");
      await p.close();
    } finally {
      await proxy.close();
    }
  }, 90_000);

  it("searches the log: only the lines holding the text, marked; downloads the whole log as text", async () => {
    const jobId = await jobs.enqueue(ws, "process", {
      argv: ["sh", "-c", "echo 'alpha one'; echo 'beta two'; echo 'Alpha three'"],
    });
    expect((await jobs.settled(jobId)).state).toBe("succeeded");
    const saved = await mkdtemp(join(tmpdir(), "forelead-dash-log-"));
    try {
      const p = await dash.newPage();
      const cdp = await p.page.createCDPSession();
      await cdp.send("Browser.setDownloadBehavior", { behavior: "allow", downloadPath: saved });
      await p.open(`#/jobs/${jobId}`);
      await shows(p, ".log", "Alpha three");
      await p.page.type("input[name=log-search]", "ALPHA");
      await shows(p, "[data-log-matches]", "2 of 3 lines");
      expect(await logText(p)).toBe("alpha one\nAlpha three\n");
      expect(await p.page.$$eval(".log mark", (m) => m.map((e) => e.textContent))).toEqual([
        "alpha",
        "Alpha",
      ]);
      await p.page.$eval("#log-title", (e) => e.scrollIntoView());
      await p.screenshot("job-log-search", { fullPage: false });
      await p.page.click("input[name=log-search]", { count: 3 });
      await p.page.keyboard.press("Backspace");
      await shows(p, ".log", "beta two");
      expect(await p.page.$(".log mark")).toBeNull();
      await p.page.click("[data-log-download]");
      const text = await eventually("the log download to be saved", () =>
        readFile(join(saved, `job-${jobId}.log`), "utf8").catch(() => undefined),
      );
      expect(text).toBe("alpha one\nbeta two\nAlpha three\n");
      expect(p.errors).toEqual([]);
      await p.close();
    } finally {
      await rm(saved, { recursive: true, force: true });
    }
  }, 90_000);

  it("lists a settled job's artifacts and downloads one through the dashboard, byte for byte", async () => {
    const jobId = await jobs.enqueue(ws, "process", {
      argv: [
        "sh",
        "-c",
        "mkdir -p output/reports && printf '<testsuite tests=\"1\"/>' > output/reports/junit.xml",
      ],
    });
    expect((await jobs.settled(jobId)).state).toBe("succeeded");
    const saved = await mkdtemp(join(tmpdir(), "forelead-dash-download-"));
    try {
      const p = await dash.newPage();
      const cdp = await p.page.createCDPSession();
      await cdp.send("Browser.setDownloadBehavior", { behavior: "allow", downloadPath: saved });
      await p.open(`#/jobs/${jobId}`);
      await p.page.waitForSelector('tr[data-artifact="reports/junit.xml"] button');
      await p.page.click('tr[data-artifact="reports/junit.xml"] button');
      const file = join(saved, "junit.xml");
      const bytes = await eventually("the download to be saved", () =>
        readFile(file, "utf8").catch(() => undefined),
      );
      expect(bytes).toBe('<testsuite tests="1"/>');
      expect(p.errors).toEqual([]);
      await p.close();
    } finally {
      await rm(saved, { recursive: true, force: true });
    }
  }, 90_000);

  it(
    "cancels a running job after a confirmation; an identity without the " +
      "enqueue role is refused and the page says so",
    async () => {
      const jobId = await jobs.enqueue(ws, "process", {
        argv: ["sh", "-c", "echo started; exec sleep 60"],
      });
      const reader = await dash.newPage({
        dashboard: await dash.dashboardAs(await dash.cp.pki.service("dash-reader")),
      });
      await reader.open(`#/jobs/${jobId}`);
      await shows(reader, ".log", "started");
      await reader.page.click(".cancel button[data-action]");
      await reader.page.waitForSelector(".cancel dialog[open]");
      await reader.page.click(".cancel dialog button[data-confirm=yes]");
      await reader.page.waitForSelector(".cancel .error[data-code=permission_denied]");
      expect(await reader.page.$eval(".cancel .error", (e) => e.textContent)).toContain(
        "permission_denied",
      );

      const p = await dash.newPage();
      await p.open(`#/jobs/${jobId}`);
      await shows(p, "[data-state-badge]", "running");
      await p.page.click(".cancel button[data-action]");
      await p.page.waitForSelector(".cancel dialog[open]");
      // Escape closes the dialog without cancelling (keyboard use).
      await p.page.keyboard.press("Escape");
      await p.page.waitForSelector(".cancel dialog:not([open])");
      await p.page.click(".cancel button[data-action]");
      await p.page.waitForSelector(".cancel dialog[open]");
      await p.page.click(".cancel dialog button[data-confirm=yes]");
      await shows(p, "[data-state-badge]", "cancelled");
      await shows(p, ".timeline", "cancel requested");
      // The reader's page followed it too, from the event stream.
      await shows(reader, "[data-state-badge]", "cancelled");
      expect((await jobs.settled(jobId)).state).toBe("cancelled");
      expect(p.errors).toEqual([]);
      await reader.close();
      // Each open page holds its streams (HTTP/1.1: six connections an origin in chromium).
      await p.close();
    },
    90_000,
  );
});

describe("the jobs page", () => {
  it(
    "lists jobs with their states and a queued job's waiting reason, filters " +
      "them, and shows a new job live",
    async () => {
      const stuck = await jobs.enqueue(ws, "process", { argv: ["true"] }, { labels: ["gpu"] });
      const p = await dash.newPage();
      await p.open("#/jobs");
      await p.page.waitForSelector(`tr[data-job="${stuck}"]`);
      expect(
        await p.page.$eval(`tr[data-job="${stuck}"] [data-state-badge]`, (e) => e.textContent),
      ).toBe("queued");
      const waiting = await p.page.$eval(`tr[data-job="${stuck}"] [data-waiting]`, (e) => ({
        code: e.getAttribute("data-waiting"),
        text: e.textContent,
      }));
      expect(waiting.code).toBe("missing_labels");
      expect(waiting.text).toContain("gpu");
      const states = await p.page.$$eval("tr[data-job]", (rows) =>
        rows.map((r) => r.getAttribute("data-state")),
      );
      expect(states).toEqual(expect.arrayContaining(["queued", "succeeded", "cancelled"]));
      await p.screenshot("jobs");

      // A job enqueued now appears without a reload: the page follows the event stream.
      const fresh = await jobs.enqueue("dj-other", "process", { argv: ["true"] });
      await p.page.waitForSelector(`tr[data-job="${fresh}"]`);

      // The state filter (keyboard: the form submits with Enter).
      await p.page.select("select[name=state]", "queued");
      await p.page.focus("input[name=workspace]");
      await p.page.keyboard.type(ws);
      await p.page.keyboard.press("Enter");
      await waitForDom(p.page, `!document.querySelector('tr[data-job="${fresh}"]')`, 30_000);
      const shown = await p.page.$$eval("tr[data-job]", (rows) =>
        rows.map((r) => [r.getAttribute("data-job"), r.getAttribute("data-state")]),
      );
      expect(shown).toEqual([[stuck, "queued"]]);
      // The link leads to the job's page.
      await p.page.click(`tr[data-job="${stuck}"] a`);
      await shows(p, "main h1", stuck);
      await shows(p, ".waiting", "gpu");
      expect(p.errors).toEqual([]);
      // Each open page holds its streams (HTTP/1.1: six connections an origin in chromium).
      await p.close();
    },
    90_000,
  );

  it("shows a job's display name above its id, as text, and as its page's heading", async () => {
    const name = "Nightly <b>build</b> ✓";
    const named = await jobs.enqueue(ws, "process", { argv: ["true"] }, { displayName: name });
    const p = await dash.newPage();
    await p.open("#/jobs");
    await shows(p, `tr[data-job="${named}"] [data-job-name]`, name);
    expect(await p.page.$$eval(`tr[data-job="${named}"] b`, (e) => e.length)).toBe(0);
    await p.page.click(`tr[data-job="${named}"] a`);
    await shows(p, "main h1 [data-job-name]", name);
    await shows(p, "main h1", named);
    expect(p.errors).toEqual([]);
    await p.close();
  }, 90_000);

  it("is readable at 320 px: each row a block, nothing wider than the screen", async () => {
    const p = await dash.newPage({ width: 320 });
    await p.open("#/jobs");
    await p.page.waitForSelector("tr[data-job]");
    const overflow = await p.page.evaluate(
      "document.documentElement.scrollWidth - document.documentElement.clientWidth",
    );
    expect(overflow).toBeLessThanOrEqual(0);
    await p.close();
  }, 90_000);
});

describe("the events page", () => {
  it("opens with the recent history, not empty, newest first", async () => {
    const jobId = await jobs.enqueue(ws, "process", { argv: ["true"] });
    expect((await jobs.settled(jobId)).state).toBe("succeeded");
    const p = await dash.newPage();
    await p.open("#/events");
    // Nothing happens after the page opens: what it shows is the history it read.
    await p.page.waitForSelector(`tr[data-type="job.settled"] a[href="#/jobs/${jobId}"]`);
    const ofJob = await p.page.$$eval(`tr[data-type] a[href="#/jobs/${jobId}"]`, (links) =>
      links.map((a) => a.closest("tr")!.getAttribute("data-type")),
    );
    expect(ofJob[0]).toBe("job.settled");
    expect(ofJob.at(-1)).toBe("job.queued");
    expect(p.errors).toEqual([]);
    await p.close();
  }, 90_000);

  it("shows a new event as it happens", async () => {
    const p = await dash.newPage();
    await p.open("#/events");
    await shows(p, ".live", "live");
    const jobId = await jobs.enqueue(ws, "process", { argv: ["sh", "-c", "echo hi"] });
    await p.page.waitForSelector(`tr[data-type="job.queued"] a[href="#/jobs/${jobId}"]`);
    // Its run follows: leased and settled, newest first.
    await p.page.waitForSelector(`tr[data-type="job.settled"] a[href="#/jobs/${jobId}"]`);
    const types = await p.page.$$eval("tr[data-type]", (rows) =>
      rows.map((r) => r.getAttribute("data-type")),
    );
    expect(types.indexOf("job.settled")).toBeLessThan(types.lastIndexOf("job.queued"));
    await p.screenshot("events");
    expect(p.errors).toEqual([]);
    // Each open page holds its streams (HTTP/1.1: six connections an origin in chromium).
    await p.close();
  }, 90_000);
});
