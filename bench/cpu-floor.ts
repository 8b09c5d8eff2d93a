// What a control plane that cost no CPU at all could reach on the machine a benchmark ran on
// (docs/performance.md, "What the unmet rows would need on this machine"). Every run records the
// CPU of each role during its timed part: the runner clients and Postgres do work that any control
// plane causes, so the machine's cores ÷ (client + Postgres CPU a unit) is the rate with a free
// control plane, set beside the peer's rate in the same run (graphile-worker for leases, the bare
// HTTP/2 server for ingest). Where that bound is below the goal, no cut of the control plane's own
// CPU meets the goal on that machine; where it is above, the last column is the control plane's CPU
// a unit that would. Reads results written by bench:leases and bench:streams; not part of `npm run
// bench`. Run: node --import tsx bench/cpu-floor.ts [--cores N (default: the cores each result
// records)] [RESULT.json ...]
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import type { CpuUse } from "./lib/cpu.js";
import { intFlag } from "./lib/options.js";
import { formatTable, type ScenarioReport } from "./lib/report.js";

interface LeaseRun {
  system: string;
  concurrency: number;
  jobs: number;
  jobsPerSecond: number;
  cpu: CpuUse;
}
interface StreamSide {
  lines: number;
  linesPerSecond: number;
  cpu: CpuUse;
}
interface StreamCell {
  leases: number;
  lineBytes: number;
  transport: string;
  ours: StreamSide;
  bare: StreamSide;
}
type Measured = CpuUse & { rate: number; units: number };

const { values, positionals } = parseArgs({
  options: { cores: { type: "string" } },
  allowPositionals: true,
});
const files = positionals.length
  ? positionals
  : ["bench/results/lease-throughput.json", "bench/results/streams-ingest.json"];

/** CPU milliseconds a unit, by role. */
function perUnit(cpu: CpuUse, units: number): Record<string, number> {
  return Object.fromEntries(
    Object.entries(cpu.rolesPctOfCore).map(([role, pct]) => [
      role,
      ((pct / 100) * cpu.wallMs) / units,
    ]),
  );
}

/**
 * One row: ours beside the peer, with the bound a free control plane would reach with the machine
 * 100 % busy and as busy as our run kept it (what waits between the processes left idle).
 */
function row(
  cores: number,
  label: string,
  goal: number,
  ours: Measured,
  peer: Measured,
  unit: (ms: number) => string,
): string[] {
  const cost = perUnit(ours, ours.units);
  const peerServer = perUnit(peer, peer.units).server ?? 0;
  const caused = (cost.client ?? 0) + (cost.postgres ?? 0);
  const bound = (busyShare: number) => (busyShare * cores * 1000) / caused / peer.rate;
  const busy = ours.machineBusyPct / 100;
  const budget = (busy * cores * 1000) / (goal * peer.rate) - caused;
  return [
    label,
    (ours.rate / peer.rate).toFixed(2),
    unit(cost.server ?? 0),
    unit(cost.client ?? 0),
    unit(cost.postgres ?? 0),
    `${bound(1).toFixed(2)} / ${bound(busy).toFixed(2)} (${ours.machineBusyPct} %)`,
    String(goal),
    budget > 0 ? unit(budget) : "none",
    unit(peerServer),
  ];
}

const rows: string[][] = [];
for (const file of files) {
  const result = JSON.parse(readFileSync(file, "utf8")) as ScenarioReport & {
    figures: { runs?: LeaseRun[]; cells?: StreamCell[] };
  };
  // The cores of the machine the results were measured on, unless told otherwise.
  const cores = intFlag(values.cores, "cores", result.machine.cores, 1, 1024);
  for (const cell of result.figures.cells ?? []) {
    const micros = (ms: number) => `${(ms * 1000).toFixed(1)} µs`;
    const ours = { ...cell.ours.cpu, rate: cell.ours.linesPerSecond, units: cell.ours.lines };
    rows.push(
      row(
        cores,
        `${cell.leases} × ${cell.lineBytes} B ${cell.transport}, a line`,
        0.5,
        ours,
        { ...cell.bare.cpu, rate: cell.bare.linesPerSecond, units: cell.bare.lines },
        micros,
      ),
    );
  }
  const runs = result.figures.runs ?? [];
  for (const concurrency of new Set(runs.map((r) => r.concurrency))) {
    const peer = runs.find((r) => r.concurrency === concurrency && r.system === "graphile-worker");
    if (!peer) continue;
    for (const run of runs.filter(
      (r) => r.concurrency === concurrency && r.system.startsWith("ours"),
    )) {
      const ours = { ...run.cpu, rate: run.jobsPerSecond, units: run.jobs };
      rows.push(
        row(
          cores,
          `N = ${concurrency}, ${run.system}, a job`,
          1,
          ours,
          { ...peer.cpu, rate: peer.jobsPerSecond, units: peer.jobs },
          (ms) => `${ms.toFixed(3)} ms`,
        ),
      );
    }
  }
}
console.log(
  formatTable({
    title: "What a control plane costing no CPU would reach on the machine of each run",
    columns: [
      "cell",
      "ours ÷ peer",
      "control plane",
      "clients",
      "Postgres",
      "bound with a free control plane ÷ peer, machine 100 % busy / as busy as our run",
      "goal",
      "control plane's CPU a unit that meets the goal as busy as our run",
      "the peer's own server process",
    ],
    rows,
  }),
);
