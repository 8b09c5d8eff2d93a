// npm run bench: every scenario of bench/lib/scenarios.ts, one after the
// other, each in its own process (so one's leftovers cannot slow the next),
// each printing its table and writing bench/results/<scenario>.json; then
// every table again and the total time. Flags: --size tiny|full (default
// full), --only a,b to run some. Needs DATABASE_URL for the peers.
import { spawn } from "node:child_process";
import { readFile } from "node:fs/promises";
import path from "node:path";
import { parseArgs } from "node:util";
import { formatTable, resultsDir, type ScenarioReport } from "./lib/report.js";
import { presentScenarios, scenarios, scenarioScript } from "./lib/scenarios.js";

/** Longest any one scenario may take before it is killed (with its helpers). */
const scenarioLimitMs = 20 * 60_000;

const { values } = parseArgs({
  args: process.argv.slice(2),
  options: { size: { type: "string" }, only: { type: "string" } },
});
const only = values.only ? new Set(values.only.split(",")) : undefined;
const size = values.size ?? process.env.BENCH_SIZE ?? "full";

if (!process.env.DATABASE_URL)
  console.log(
    "bench: no DATABASE_URL; ours runs on the embedded database and the " +
      "peers are skipped (set DATABASE_URL=postgres://... for every figure)",
  );
const started = performance.now();
const ran: Array<{ scenario: string; seconds: number; ok: boolean }> = [];
const present = presentScenarios();
for (const scenario of scenarios) {
  if (only && !only.has(scenario)) continue;
  const script = scenarioScript(scenario);
  if (!present.includes(scenario)) {
    console.log(`bench: ${scenario}: no bench/${scenario}.ts in this checkout; skipped`);
    continue;
  }
  console.log(`\nbench: ${scenario} (${size})`);
  const t0 = performance.now();
  const ok = await run(script, ["--size", size]);
  ran.push({ scenario, seconds: Math.round((performance.now() - t0) / 100) / 10, ok });
}

const totalSeconds = Math.round((performance.now() - started) / 1000);
console.log(`\n## Every table (${size}), ${new Date().toISOString()}\n`);
for (const { scenario, ok } of ran) {
  if (!ok) continue;
  const report = JSON.parse(
    await readFile(path.join(resultsDir(), `${scenario}.json`), "utf8"),
  ) as ScenarioReport;
  console.log(`${formatTable(report.table)}\n`);
}
for (const r of ran)
  console.log(`bench: ${r.scenario} ${r.ok ? "done" : "FAILED"} in ${r.seconds} s`);
console.log(`bench: total ${Math.floor(totalSeconds / 60)} min ${totalSeconds % 60} s`);
if (ran.some((r) => !r.ok)) process.exit(1);

/** Runs one scenario in its own process group, killed whole if it overruns. */
function run(script: string, args: readonly string[]): Promise<boolean> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ["--import", "tsx", script, ...args], {
      stdio: "inherit",
      detached: true,
    });
    const timer = setTimeout(() => {
      console.error(
        `bench: ${path.basename(script)} ran over ${scenarioLimitMs / 60_000} min; killed`,
      );
      process.kill(-child.pid!, "SIGKILL");
    }, scenarioLimitMs);
    child.once("exit", (code) => {
      clearTimeout(timer);
      resolve(code === 0);
    });
  });
}
