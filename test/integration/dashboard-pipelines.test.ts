// The dashboard's pipelines pages in a real browser (test/support/browser.ts), with a real runner
// running a real pipeline's steps: the list (newest first, state, workspace) and one pipeline's
// step graph (a column per depth, each step's state and needs, a link to its job's page).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { useDashboard, waitForDom, type DashboardPage } from "../support/browser.js";
import { specFor, startTestRunner, type TestRunner } from "../support/runner-agent.js";
import { eventually } from "../support/actors.js";

const dash = useDashboard();
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
