// The dashboard's pipelines pages in a real browser (test/support/browser.ts), with a real runner
// running a real pipeline's steps: the list (newest first, state, workspace) and one pipeline's
// step graph (a column per depth, each step's state and needs, a link to its job's page); and the
// job page's Retry / Re-run button, offered to whom RetryJob allows and to nobody else.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { useDashboard, waitForDom, type DashboardPage } from "../support/browser.js";
import { specFor, startTestRunner, type TestRunner } from "../support/runner-agent.js";
import { eventually } from "../support/actors.js";
import { parseRoleGrant } from "../../src/identity/roles.js";

const dash = useDashboard({
  grants: [parseRoleGrant("spiffe://forelead/services/dp-reader=read:dp1")],
});
const ws = "dp1";
let runner: TestRunner;

beforeAll(async () => {
  runner = await startTestRunner(dash.cp, {
    runnerId: `dp1-${Math.random().toString(36).slice(2, 8)}`,
    workspaceId: ws,
    executor: "process",
    slots: 2,
  });
});
afterAll(async () => {
  await runner?.close();
});

/** Submits a pipeline in `ws`; its id. */
async function submit(name: string, steps: Record<string, unknown>[]): Promise<string> {
  const reply = await dash.cp.admin.rest.request("POST", "/v1/admin/pipelines", {
    apiVersion: "v1",
    workspaceId: ws,
    name,
    steps,
  });
  expect(reply.status, reply.text).toBe(200);
  return reply.json.pipeline.id as string;
}

/** The pipeline once it has settled. */
function settled(id: string) {
  return eventually(
    `pipeline ${id} to settle`,
    async () => {
      const p = (await dash.cp.admin.rest.request("GET", `/v1/admin/pipelines/${id}`)).json
        .pipeline;
      return ["succeeded", "failed", "cancelled"].includes(p.state) ? p : undefined;
    },
    30_000,
  );
}

/** Waits until `selector` in the page holds `text`. */
async function shows(p: DashboardPage, selector: string, text: string): Promise<void> {
  const found =
    `[...document.querySelectorAll(${JSON.stringify(selector)})].some((e) => ` +
    `(e.textContent ?? "").includes(${JSON.stringify(text)}))`;
  await waitForDom(p.page, found, 20_000).catch(async (err: Error) => {
    const seen = await p.page.evaluate(`document.querySelector("main")?.innerText`).catch(() => "");
    throw new Error(
      `the page shows no ${selector} with ${JSON.stringify(text)} (${err.message}); it ` +
        `shows:\n${String(seen)}\nerrors: ${JSON.stringify(p.errors)}`,
    );
  });
}

const step = (name: string, needs: string[], argv: string[], extra = {}) => ({
  name,
  needs,
  spec: specFor("process", { argv }),
  ...extra,
});

describe("the pipelines pages", () => {
  it(
    "list pipelines newest first and show one's step graph by depth, each step's state " +
      "and needs, linking a step to its job",
    async () => {
      const first = await submit("nightly", [step("only", [], ["true"])]);
      await settled(first);
      const id = await submit("release", [
        step("build", [], ["true"], { displayName: "Build the images" }),
        step("test", ["build"], ["sh", "-c", "exit 3"]),
        step("lint", ["build"], ["true"]),
        step("publish", ["test", "lint"], ["true"]),
      ]);
      const done = await settled(id);
      expect(done.state).toBe("failed");

      const p = await dash.newPage();
      await p.open("#/pipelines");
      await shows(p, `tr[data-pipeline="${id}"]`, "failed");
      const rows = await p.page.$$eval("tr[data-pipeline]", (trs) =>
        trs.map((tr) => tr.getAttribute("data-pipeline")),
      );
      // Newest first: the release before the nightly.
      expect(rows.indexOf(id)).toBeLessThan(rows.indexOf(first));
      expect(rows.indexOf(first)).toBeGreaterThanOrEqual(0);
      await shows(p, `tr[data-pipeline="${id}"]`, ws);
      await shows(p, `tr[data-pipeline="${id}"]`, "release");
      await p.screenshot("pipelines");

      await p.page.click(`tr[data-pipeline="${id}"] a`);
      await shows(p, "h1", id);
      await shows(p, '[data-step="publish"]', "skipped");
      // A column per depth: build; then test and lint; then publish.
      const layers = await p.page.$$eval(".step-layer", (ols) =>
        ols.map((ol) => [...ol.querySelectorAll("[data-step]")].map((s) => s.dataset.step)),
      );
      expect(layers).toEqual([["build"], ["test", "lint"], ["publish"]]);
      const states = await p.page.$$eval("[data-step]", (ss) =>
        Object.fromEntries(ss.map((s) => [s.dataset.step, s.dataset.state])),
      );
      expect(states).toEqual({
        build: "succeeded",
        test: "failed",
        lint: "succeeded",
        publish: "skipped",
      });
      await shows(p, '[data-step="publish"] .step-needs', "needs test, lint");
      await shows(p, '[data-step="build"]', "Build the images");
      await p.screenshot("pipeline");

      // A step links to its job's page; a skipped step has no job to link.
      const buildJob = done.steps.find((s: { name: string }) => s.name === "build").jobId;
      expect(await p.page.$('[data-step="publish"] a')).toBeNull();
      await p.page.click('[data-step="build"] a');
      await shows(p, "h1", "Build the images");
      expect(p.page.url()).toContain(`#/jobs/${buildJob}`);
      expect(p.errors).toEqual([]);
      await p.close();
    },
    90_000,
  );
});

describe("the job page's retry button", () => {
  /** A settled job's id, enqueued by the test admin. */
  async function settledJob(argv: string[]): Promise<string> {
    const reply = await dash.cp.admin.enqueue({
      workspaceId: ws,
      spec: specFor("process", { argv }),
    });
    expect(reply.status, reply.text).toBe(200);
    const id = reply.json.job.id as string;
    await eventually(`job ${id} to settle`, async () => {
      const job = (await dash.cp.admin.job(id)).json.job;
      return ["succeeded", "failed", "cancelled"].includes(job.state) ? job : undefined;
    });
    return id;
  }

  /** Opens a job's page and waits for the control plane's answer to what the person may do. */
  async function openJob(p: DashboardPage, id: string): Promise<void> {
    const asked = p.page.waitForResponse((r) => r.url().endsWith("/GetJobActions"));
    await p.open(`#/jobs/${id}`);
    expect((await asked).status()).toBe(200);
    await shows(p, "[data-state-badge]", "");
  }

  it(
    "offers an admin Retry on a failed job (confirm first), opens the new job, and then " +
      "offers no second retry of the old one",
    async () => {
      const failed = await settledJob(["sh", "-c", "exit 3"]);
      const p = await dash.newPage();
      await openJob(p, failed);
      await shows(p, ".retry button[data-action]", "Retry");
      // Escape keeps the job as it is: no retry.
      await p.page.click(".retry button[data-action]");
      await p.page.waitForSelector(".retry dialog[open]");
      await p.page.keyboard.press("Escape");
      await p.page.waitForSelector(".retry dialog:not([open])");
      expect((await dash.cp.admin.job(failed)).json.job.retriedBy).toBeUndefined();

      await p.page.click(".retry button[data-action]");
      await p.page.waitForSelector(".retry dialog[open]");
      await p.page.click(".retry dialog button[data-confirm=yes]");
      const retriedBy = await eventually("the retry", async () => {
        return (await dash.cp.admin.job(failed)).json.job.retriedBy as string | undefined;
      });
      await shows(p, "h1", retriedBy);
      expect((await dash.cp.admin.job(retriedBy)).json.job.retryOf).toBe(failed);

      await openJob(p, failed);
      expect(await p.page.$(".retry button")).toBeNull();
      expect(p.errors).toEqual([]);
      await p.close();
    },
    60_000,
  );

  it("labels it Re-run on a succeeded job, and offers a read-only person neither", async () => {
    const succeeded = await settledJob(["true"]);
    const p = await dash.newPage();
    await openJob(p, succeeded);
    await shows(p, ".retry button[data-action]", "Re-run");
    await p.close();

    const reader = await dash.newPage({
      dashboard: await dash.dashboardAs(await dash.cp.pki.service("dp-reader")),
    });
    await openJob(reader, succeeded);
    await shows(reader, "[data-state-badge]", "succeeded");
    expect(await reader.page.$(".retry button")).toBeNull();
    // Signing in lands on the Overview, whose whole-fleet status and stats a reader of one
    // workspace may not read: Chromium logs each such 403 however the page handles it, and
    // whether they come before the job page opens is timing. Nothing else may be logged (the job
    // page's own GetJobActions answered 200 above).
    expect(reader.errors.filter((e) => !/status of 403 \(Forbidden\)/.test(e))).toEqual([]);
    await reader.close();
  }, 60_000);
});
