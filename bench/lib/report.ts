import { mkdir, rename, writeFile } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describeMachine, type Machine } from "./machine.js";
import type { CommonOptions } from "./options.js";

/** One printed table: what a scenario shows on the terminal and in docs/performance.md. */
export interface Table {
  readonly title: string;
  readonly columns: readonly string[];
  readonly rows: ReadonlyArray<ReadonlyArray<string | number | null>>;
}

/** Everything one scenario run measured, as written to bench/results/<scenario>.json. */
export interface ScenarioReport {
  readonly scenario: string;
  readonly title: string;
  /** "full" for the published figures, "tiny" for the smoke test. */
  readonly size: string;
  readonly startedAt: string;
  readonly durationMs: number;
  readonly machine: Machine;
  /** "postgres" or "embedded": peers and multi-process runs need postgres. */
  readonly database: string;
  /** What limits the figures, what was skipped and why. */
  readonly notes: readonly string[];
  readonly table: Table;
  /** Every figure behind the table, and more. */
  readonly figures: unknown;
}

const defaultResultsDir = fileURLToPath(new URL("../results", import.meta.url));

/** Where results go: BENCH_RESULTS_DIR, or bench/results. */
export function resultsDir(): string {
  return process.env.BENCH_RESULTS_DIR ?? defaultResultsDir;
}

/** Renders `table` as aligned text (Markdown-compatible pipes). */
export function formatTable(table: Table): string {
  const cells = [
    table.columns.map(String),
    ...table.rows.map((r) =>
      r.map((c) => (c === null ? "–" : typeof c === "number" ? c.toLocaleString("en-US") : c)),
    ),
  ];
  const widths = table.columns.map((_, i) => Math.max(...cells.map((r) => (r[i] ?? "").length)));
  const line = (r: readonly string[]) =>
    `| ${r.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join(" | ")} |`;
  const rule = `|${widths.map((w, i) => (i === 0 ? "-".repeat(w + 2) : `${"-".repeat(w + 1)}:`)).join("|")}|`;
  return [`### ${table.title}`, "", line(cells[0]!), rule, ...cells.slice(1).map(line)].join("\n");
}

/** Prints the table and notes, and writes the JSON report atomically; returns its path. */
async function publish(report: ScenarioReport): Promise<string> {
  console.log(`\n${formatTable(report.table)}\n`);
  for (const note of report.notes) console.log(`* ${note}`);
  const dir = resultsDir();
  await mkdir(dir, { recursive: true });
  const file = path.join(dir, `${report.scenario}.json`);
  await writeFile(`${file}.tmp`, JSON.stringify(report, null, 2) + "\n");
  await rename(`${file}.tmp`, file);
  console.log(
    `\nwrote ${path.relative(process.cwd(), file)} (${(report.durationMs / 1000).toFixed(1)} s)`,
  );
  return file;
}

/**
 * What a scenario measured; publishScenario adds the run's envelope (size, times, machine,
 * database).
 */
export type ScenarioResult = Pick<
  ScenarioReport,
  "scenario" | "title" | "notes" | "table" | "figures"
>;

/**
 * Publishes `result` with the envelope every report carries: the size and
 * database of `options`, the time since `started` (a performance.now()
 * reading taken when the scenario began) and the machine.
 */
export async function publishScenario(
  options: CommonOptions,
  started: number,
  result: ScenarioResult,
): Promise<string> {
  const durationMs = Math.round(performance.now() - started);
  return publish({
    ...result,
    size: options.size,
    startedAt: new Date(Date.now() - durationMs).toISOString(),
    durationMs,
    machine: await describeMachine(options.databaseUrl),
    database: options.databaseUrl ? "postgres" : "embedded",
  });
}
