import { RowFailure, startHarness, type Harness, type KitOptions } from "./harness.js";
import { controlPlaneFeatures, rows, undeclared, type Row } from "./rows.js";

/** One row of the kit's table. */
export interface RowResult {
  readonly row: string;
  readonly result: "pass" | "fail" | "skip";
  readonly reason: string;
  /** What the row holds, for the table's reader. */
  readonly holds: string;
  readonly seconds: number;
}

/**
 * Runs every row against the runner `options.runnerCommand` starts, on a
 * throwaway control plane, and reports each as it ends (`onRow`). A row the
 * control plane or the runner lacks the feature for is skipped with the
 * reason; after a failed `register` the rest are skipped.
 */
export async function runConformance(
  options: KitOptions,
  onRow: (result: RowResult) => void = () => {},
  only: readonly Row[] = rows,
): Promise<RowResult[]> {
  const h = await startHarness(options);
  const results: RowResult[] = [];
  const report = (r: RowResult) => {
    results.push(r);
    onRow(r);
  };
  try {
    for (const row of only) {
      const started = Date.now();
      const base = { row: row.name, holds: row.holds };
      const skip = results.some((r) => r.row === "register" && r.result !== "pass")
        ? "the runner did not register"
        : await missingFeature(h, row);
      if (skip) {
        report({ ...base, result: "skip", reason: skip, seconds: 0 });
        continue;
      }
      const outputBefore = (await h.runnerOutput()).length;
      try {
        const reason = await row.run(h);
        report({ ...base, result: "pass", reason, seconds: (Date.now() - started) / 1000 });
      } catch (err) {
        const failure =
          err instanceof RowFailure
            ? err.message
            : `the kit could not run the row: ${(err as Error).message}`;
        const reason = withRunnerOutput(failure, (await h.runnerOutput()).slice(outputBefore));
        report({ ...base, result: "fail", reason, seconds: (Date.now() - started) / 1000 });
      }
    }
  } finally {
    await h.close();
  }
  return results;
}

/** Lines of the runner's output a failed row's reason ends with, at most. */
const outputLines = 20;

/**
 * A failed row's reason followed by what the runner wrote while the row ran (its last lines), so
 * the table shows the runner's side of the failure; a reason that quotes the output already is
 * kept as it is.
 */
function withRunnerOutput(reason: string, output: string): string {
  if (reason.includes("its output:")) return reason;
  const lines = output.split("\n").filter((l) => l.trim() !== "");
  if (!lines.length) return `${reason}\nthe runner wrote nothing while the row ran`;
  const shown = lines.slice(-outputLines);
  return (
    `${reason}\nthe runner's output while the row ran` +
    `${shown.length < lines.length ? ` (last ${shown.length} of ${lines.length} lines)` : ""}:\n` +
    shown.join("\n")
  );
}

/**
 * Why a row needing features is skipped: the first one this control plane does not serve, or the
 * ones the runner did not declare.
 */
async function missingFeature(h: Harness, row: Row): Promise<string | undefined> {
  const wanted = row.features ?? [];
  const unserved = wanted.find((f) => !controlPlaneFeatures.has(f));
  if (unserved) return `this control plane does not serve ${unserved} yet`;
  const missing = wanted.length ? await undeclared(h, wanted) : [];
  return missing.length ? `the runner does not declare ${missing.join(", ")}` : undefined;
}

/**
 * The results as a table: row, result, reason (one line each; a long reason wraps under its row).
 */
export function formatTable(results: readonly RowResult[]): string {
  const width = Math.max(3, ...results.map((r) => r.row.length));
  const lines = [`${"ROW".padEnd(width)}  RESULT  REASON`];
  for (const r of results) {
    const [first, ...rest] = r.reason.split("\n");
    lines.push(
      `${r.row.padEnd(width)}  ${r.result.padEnd(6)}  ${first}`,
      ...rest.map((l) => `${" ".repeat(width + 10)}${l}`),
    );
  }
  const count = (result: RowResult["result"]) => results.filter((r) => r.result === result).length;
  lines.push("", `${count("pass")} passed, ${count("fail")} failed, ${count("skip")} skipped`);
  return `${lines.join("\n")}\n`;
}
