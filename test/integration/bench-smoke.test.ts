// The benchmark scripts run at tiny size on every `npm test`, so they cannot
// rot; the figures themselves come from `npm run bench` (docs/performance.md).
// Embedded: ours only (one in-process control plane, and one `forelead serve`
// for the connections). With DATABASE_URL: also two control planes on one
// Postgres, graphile-worker and pg-boss.
import { spawn } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import type { ScenarioReport } from "../../bench/lib/report.js";
import { presentScenarios } from "../../bench/lib/scenarios.js";
import { databaseKind } from "../support/database.js";

const repoRoot = fileURLToPath(new URL("../..", import.meta.url));
/** Bound of the whole tiny run: well over what it takes (under a minute on 2 idle cores). */
const limitMs = 280_000;

describe(`benchmarks at tiny size (${databaseKind})`, () => {
  let dir: string | undefined;
  afterAll(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it(
    "every scenario runs at tiny size, prints its table and writes its results with the machine",
    async () => {
      dir = await mkdtemp(path.join(os.tmpdir(), "forelead-bench-smoke-"));
      const env = {
        ...process.env,
        BENCH_RESULTS_DIR: dir,
        BENCH_DATABASE: `forelead_bench_smoke_${process.pid}`,
      };
      const { code, output } = await runNode(
        ["--import", "tsx", "bench/run-all.ts", "--size", "tiny"],
        env,
      );
      expect(code, output).toBe(0);

      const scenarios = presentScenarios();
      expect(scenarios).toEqual(
        expect.arrayContaining([
          "lease-throughput",
          "pickup-latency",
          "streams-ingest",
          "connections",
          "queue-scale",
          "enqueue-throughput",
        ]),
      );
      for (const scenario of scenarios) {
        const report = JSON.parse(
          await readFile(path.join(dir, `${scenario}.json`), "utf8"),
        ) as ScenarioReport;
        expect(report.scenario).toBe(scenario);
        expect(report.size).toBe("tiny");
        expect(report.database).toBe(databaseKind);
        expect(report.machine.cores).toBeGreaterThan(0);
        expect(report.machine.cpuModel).not.toBe("");
        expect(report.machine.node).toBe(process.version);
        expect(report.machine.postgres).toMatch(
          databaseKind === "postgres" ? /^PostgreSQL \d+/ : /PGlite/,
        );
        expect(report.table.rows.length).toBeGreaterThan(0);
        expect(output).toContain(`### ${report.table.title}`);
      }

      const leases = JSON.parse(
        await readFile(path.join(dir, "lease-throughput.json"), "utf8"),
      ) as ScenarioReport;
      const systems = leases.table.rows.map((r) => r[1]);
      const expected =
        databaseKind === "postgres"
          ? [
              "ours, 1 process",
              "ours, 2 processes",
              "graphile-worker",
              "pg-boss fetch+complete",
              "pg-boss work() 4 × batch 100",
            ]
          : ["ours, 1 process"];
      expect(systems).toEqual(expect.arrayContaining(expected));
      for (const row of leases.table.rows) expect(row[3]).toBeGreaterThan(0); // jobs/s

      // Every cell (1 and 4 leases × 100 B and 10 KiB × NDJSON and gRPC) stored all its lines, and
      // the bare server took them all.
      const streams = JSON.parse(
        await readFile(path.join(dir, "streams-ingest.json"), "utf8"),
      ) as ScenarioReport;
      const cells = (
        streams.figures as { cells: Array<{ planned: number; ours: IngestSide; bare: IngestSide }> }
      ).cells;
      expect(cells).toHaveLength(8);
      for (const cell of cells) {
        expect(cell.ours, JSON.stringify(cell.ours)).toMatchObject({
          complete: true,
          check: "all stored",
          lines: cell.planned,
        });
        expect(cell.ours.linesPerSecond).toBeGreaterThan(0);
        expect(cell.bare, JSON.stringify(cell.bare)).toMatchObject({
          complete: true,
          lines: cell.planned,
        });
        expect(cell.bare.linesPerSecond).toBeGreaterThan(0);
      }
      for (const row of streams.table.rows) expect(row[row.length - 1]).toBe("all stored");

      // bench/cpu-floor.ts reads those results: a row a cell, its ratio the one the results hold.
      const floor = await runNode(
        [
          "--import",
          "tsx",
          "bench/cpu-floor.ts",
          path.join(dir, "lease-throughput.json"),
          path.join(dir, "streams-ingest.json"),
        ],
        env,
      );
      expect(floor.code, floor.output).toBe(0);
      const floorRows = floor.output.split("\n").filter((line) => / a line *\|/.test(line));
      expect(floorRows.map((line) => line.split("|")[2]!.trim())).toEqual(
        cells.map((c) => (c.ours.linesPerSecond / c.bare.linesPerSecond).toFixed(2)),
      );
      // lease rows need graphile-worker's run beside ours
      expect(/ a job *\|/.test(floor.output), floor.output).toBe(databaseKind === "postgres");

      // Both enqueue routes stored every job they were sent (the client checks each reply's jobs).
      const enqueues = JSON.parse(
        await readFile(path.join(dir, "enqueue-throughput.json"), "utf8"),
      ) as ScenarioReport;
      expect(enqueues.table.rows.map((r) => String(r[0]).split(" ")[0])).toEqual([
        "single",
        "batches",
      ]);
      for (const row of enqueues.table.rows) expect(row[3]).toBeGreaterThan(0); // jobs/s

      const queue = JSON.parse(
        await readFile(path.join(dir, "queue-scale.json"), "utf8"),
      ) as ScenarioReport;
      // The claim uses its index (plans come from auto_explain, which only a Postgres server has).
      const indexUsed = queue.table.columns.indexOf("index used");
      expect(indexUsed).toBeGreaterThan(0);
      for (const row of queue.table.rows)
        expect(row[indexUsed]).toBe(
          databaseKind === "postgres" ? "jobs_claimable" : "– (embedded)",
        );
    },
    limitMs + 20_000,
  );
});

/** One side of a streams-ingest cell, as bench/streams-ingest.ts writes it. */
interface IngestSide {
  readonly lines: number;
  readonly linesPerSecond: number;
  readonly complete: boolean;
  readonly check: string;
}

function runNode(
  args: readonly string[],
  env: NodeJS.ProcessEnv,
): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, args, {
      cwd: repoRoot,
      env,
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
    });
    let output = "";
    child.stdout!.setEncoding("utf8").on("data", (c: string) => (output += c));
    child.stderr!.setEncoding("utf8").on("data", (c: string) => (output += c));
    const timer = setTimeout(() => process.kill(-child.pid!, "SIGKILL"), limitMs);
    child.once("exit", (code) => {
      clearTimeout(timer);
      resolve({ code, output });
    });
  });
}
