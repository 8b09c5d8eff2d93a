// Start-up times of the `forelead` command beside a bare `node -e 0` on the same machine
// (docs/performance.md, "Start-up"): `forelead --help` compiled (dist/) and from the TypeScript
// sources, and `npm start` on an existing embedded database until it serves (its
// "serving https://..." line) and until /healthz on --metrics-listen answers. N runs of each,
// interleaved; medians. Needs the build: `npm run build` (npm ci runs it). Not part of the
// tiny-size smoke run (it reads dist/, which a test rebuilds). Run: npm run bench:start [--runs N]
import { spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { residentBytes } from "./lib/cpu.js";
import { freshDatabase } from "./lib/database.js";
import { intFlag, parseOptions } from "./lib/options.js";
import { readOrCreateSecretsKeyFile } from "../src/secrets/key-file.js";
import { publishScenario } from "./lib/report.js";
import { round, summarize } from "./lib/stats.js";

const options = parseOptions(process.argv.slice(2), { runs: "string", "idle-seconds": "string" });
const runs = intFlag(options.flags.runs, "runs", options.size === "tiny" ? 1 : 7, 1, 100);
/**
 * How long a serve idles, nothing connected, while its RSS is read once a second. The first ~20 s
 * hold the start's garbage (V8 shrinks its young generation only when its memory reducer runs); the
 * figure is the median of the last third of the readings, the start's peak is reported beside it.
 */
const idleSeconds = intFlag(
  options.flags["idle-seconds"],
  "idle-seconds",
  options.size === "tiny" ? 1 : 60,
  1,
  600,
);
const repoRoot = fileURLToPath(new URL("..", import.meta.url));
const bin = path.join(repoRoot, "bin/forelead.js");
if (!existsSync(path.join(repoRoot, "dist/cli/main.js")))
  throw new Error("dist/ is not built: run `npm run build` first");
/** The compiled command: FORELEAD_RUN_SOURCE unset (the tests set it). */
const compiledEnv = { ...process.env, FORELEAD_RUN_SOURCE: "" };
const serveLimitMs = 60_000;

const started = performance.now();
const dir = await mkdtemp(path.join(os.tmpdir(), "forelead-start-"));
const serveArgs = [
  "--listen",
  "127.0.0.1:0",
  "--metrics-listen",
  "127.0.0.1:0",
  "--database",
  path.join(dir, "db"),
  "--certs-dir",
  path.join(dir, "certs"),
];
/** RSS in MiB of an idle `forelead serve` on each database kind measured. */
const idle: { embedded?: IdleResident; postgres?: IdleResident } = {};
const samples: Record<string, number[]> = {
  node: [],
  help: [],
  helpSource: [],
  serving: [],
  healthz: [],
};
/**
 * CPU milliseconds (user + system) of each run, every process it started: the machine's load moves
 * them much less than the wall time.
 */
const cpu: Record<string, number[]> = { node: [], help: [], helpSource: [], serving: [] };
try {
  // The first start creates the database and the development PKI; the measured ones open them.
  await serveUntilReady();
  for (let i = 0; i < runs; i++) {
    samples.node!.push(
      await measured("node", () => timeExit(process.execPath, ["-e", "0"], process.env)),
    );
    samples.help!.push(
      await measured("help", () => timeExit(process.execPath, [bin, "--help"], compiledEnv)),
    );
    samples.helpSource!.push(
      await measured("helpSource", () =>
        timeExit(process.execPath, [bin, "--help"], { ...process.env, FORELEAD_RUN_SOURCE: "1" }),
      ),
    );
    const { serving, healthz } = await measured("serving", serveUntilReady);
    samples.serving!.push(serving);
    samples.healthz!.push(healthz);
  }
  idle.embedded = await idleResident(["--database", path.join(dir, "db")]);
  if (options.databaseUrl) {
    const database = await freshDatabase(options.databaseUrl, options.databaseName);
    try {
      const keyFile = path.join(dir, "secrets-pg.key");
      await readOrCreateSecretsKeyFile(keyFile);
      idle.postgres = await idleResident([
        "--database",
        database.location,
        "--secrets-key",
        keyFile,
      ]);
    } finally {
      await database.drop();
    }
  }
} finally {
  await rm(dir, { recursive: true, force: true });
}

const median = (name: string) => summarize(samples[name]!).p50;
const nodeMs = median("node");
const cpuSeconds = (name: string) => (cpu[name] ? round(summarize(cpu[name]).p50 / 1000, 2) : null);
const row = (what: string, name: string) =>
  [
    what,
    round(median(name) / 1000, 2),
    round(median(name) / nodeMs, 1),
    cpuSeconds(name),
    runs,
  ] as const;
await publishScenario(options, started, {
  scenario: "start-time",
  title: `Start-up, median of ${runs} runs (seconds; × node -e 0)`,
  notes: [
    "forelead --help: the compiled command (dist/, npm run build); from " +
      "sources: FORELEAD_RUN_SOURCE=1, compiled by tsx at every start (as " +
      "before the build step)",
    "npm start: `npm start -- --database DIR` on an existing embedded " +
      "database (created by an unmeasured first start); serving = its `serving " +
      "https://` line, /healthz = the first 200 from --metrics-listen",
    `idle RSS: \`forelead serve\` (compiled), nothing connected, read each ` +
      `second for ${idleSeconds} s after its serving line: the median of the ` +
      `last third, and the highest reading: on the embedded database of the ` +
      `runs ` +
      `above` +
      `${options.databaseUrl ? ", and on a fresh database of the PostgreSQL server of DATABASE_URL" : " (set DATABASE_URL for the PostgreSQL row)"}; ` +
      `in the seconds column: MiB`,
    "CPU seconds: user + system of every process of the run (from " +
      "/proc/self/stat's reaped-children times); for npm start, npm's too and " +
      "the whole run, its stop included",
    `load average at the end: ${os
      .loadavg()
      .map((l) => l.toFixed(2))
      .join(" ")} on ${os.cpus().length} cores`,
  ],
  table: {
    title: `Start-up, median of ${runs} runs`,
    columns: ["command", "seconds", "× node -e 0", "CPU seconds", "runs"],
    rows: [
      row("node -e 0", "node"),
      row("forelead --help", "help"),
      row("forelead --help (from sources, tsx)", "helpSource"),
      row("npm start: /healthz answers", "healthz"),
      row("npm start: serving", "serving"),
      ...idleRows(),
    ],
  },
  figures: { samplesMs: samples, cpuMs: cpu, idleRssMiB: idle },
});

/** The idle-memory rows: MiB in the seconds column, the rest empty. */
function idleRows(): (string | number | null)[][] {
  const rows: (string | number | null)[][] = [];
  for (const [kind, resident] of [
    ["embedded", idle.embedded],
    ["PostgreSQL", idle.postgres],
  ] as const) {
    if (resident === undefined) continue;
    rows.push([`forelead serve idle RSS, ${kind} (MiB)`, resident.settledMiB, null, null, 1]);
    rows.push([
      `forelead serve idle RSS, ${kind}: highest reading (MiB)`,
      resident.peakMiB,
      null,
      null,
      1,
    ]);
  }
  return rows;
}

/** An idle serve's RSS readings, one a second after its serving line, in MiB. */
interface IdleResident {
  readingsMiB: number[];
  /** The median of the last third of the readings. */
  settledMiB: number;
  peakMiB: number;
}

/**
 * Starts `forelead serve` (compiled) with `databaseArgs`, lets it idle, and returns its RSS
 * readings.
 */
async function idleResident(databaseArgs: readonly string[]): Promise<IdleResident> {
  const args = [
    bin,
    "serve",
    "--listen",
    "127.0.0.1:0",
    "--metrics-listen",
    "127.0.0.1:0",
    "--certs-dir",
    path.join(dir, "certs"),
    ...databaseArgs,
  ];
  const child = spawn(process.execPath, args, {
    cwd: repoRoot,
    env: compiledEnv,
    stdio: ["ignore", "pipe", "pipe"],
  });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  let output = "";
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () =>
          reject(
            new Error(`forelead serve did not serve within ${serveLimitMs / 1000} s: ${output}`),
          ),
        serveLimitMs,
      );
      child.once("exit", (code) =>
        reject(new Error(`forelead serve exited ${code} before serving: ${output}`)),
      );
      const onOutput = (d: Buffer) => {
        output += d.toString();
        if (!/serving https:\/\//.test(output)) return;
        clearTimeout(timer);
        resolve();
      };
      child.stdout.on("data", onOutput);
      child.stderr.on("data", onOutput);
    });
    const readingsMiB: number[] = [];
    for (let second = 1; second <= idleSeconds; second++) {
      await new Promise((r) => setTimeout(r, 1000));
      const bytes = residentBytes(child.pid!);
      if (bytes === undefined)
        throw new Error(`could not read the serve's RSS from /proc: ${output}`);
      readingsMiB.push(round(bytes / 2 ** 20, 0));
    }
    const lastThird = readingsMiB.slice(-Math.max(1, Math.floor(readingsMiB.length / 3)));
    return { readingsMiB, settledMiB: summarize(lastThird).p50, peakMiB: Math.max(...readingsMiB) };
  } finally {
    if (child.exitCode === null) child.kill("SIGTERM");
    await exited;
  }
}

/** Runs `run`, adding the CPU its (reaped) child processes used to cpu[name]. */
async function measured<T>(name: string, run: () => Promise<T>): Promise<T> {
  const before = reapedChildrenCpuMs();
  const result = await run();
  cpu[name]!.push(reapedChildrenCpuMs() - before);
  return result;
}

/**
 * User + system CPU of this process's waited-for children (and theirs), from /proc/self/stat
 * (Linux).
 */
function reapedChildrenCpuMs(): number {
  if (process.platform !== "linux") return 0;
  const stat = readFileSync("/proc/self/stat", "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  // Fields 16 and 17 (cutime, cstime) of proc(5), counted from the state (field 3) at index 0;
  // USER_HZ is 100.
  return (Number(fields[13]) + Number(fields[14])) * 10;
}

/** Milliseconds from spawning `command` until it exits (0 required). */
function timeExit(
  command: string,
  args: readonly string[],
  env: NodeJS.ProcessEnv,
): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const child = spawn(command, args, { env, stdio: ["ignore", "ignore", "pipe"] });
    let stderr = "";
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    child.once("error", reject);
    child.once("exit", (code) =>
      code === 0
        ? resolve(performance.now() - t0)
        : reject(new Error(`${command} ${args.join(" ")} exited ${code}: ${stderr}`)),
    );
  });
}

/**
 * Starts `npm start` (its own process group), measures until it serves and until /healthz
 * answers, then stops it with SIGTERM and waits for it to exit (it holds the database's lock).
 */
async function serveUntilReady(): Promise<{ serving: number; healthz: number }> {
  const t0 = performance.now();
  const child = spawn("npm", ["start", "--silent", "--", ...serveArgs], {
    cwd: repoRoot,
    env: compiledEnv,
    stdio: ["ignore", "pipe", "pipe"],
    detached: true,
  });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  let output = "";
  try {
    return await new Promise((resolve, reject) => {
      let serving: number | undefined;
      let healthz: number | undefined;
      let pollingHealthz = false;
      const timer = setTimeout(
        () =>
          reject(new Error(`npm start did not serve within ${serveLimitMs / 1000} s: ${output}`)),
        serveLimitMs,
      );
      const settle = () => {
        if (serving === undefined || healthz === undefined) return;
        clearTimeout(timer);
        resolve({ serving, healthz });
      };
      child.once("exit", (code) =>
        reject(new Error(`npm start exited ${code} before serving: ${output}`)),
      );
      const onOutput = (d: Buffer) => {
        output += d.toString();
        const metrics = /metrics and health on (http:\/\/[^ ]+)/.exec(output);
        if (metrics && healthz === undefined && !pollingHealthz) {
          pollingHealthz = true;
          void pollHealthz(`${metrics[1]}/healthz`).then(
            () => ((healthz = performance.now() - t0), settle()),
            reject,
          );
        }
        if (serving === undefined && /serving https:\/\//.test(output)) {
          serving = performance.now() - t0;
          settle();
        }
      };
      child.stdout.on("data", onOutput);
      child.stderr.on("data", onOutput);
    });
  } finally {
    if (child.exitCode === null) process.kill(-child.pid!, "SIGTERM");
    await exited;
  }
}

/** GET `url` until it answers 200 (every 10 ms). */
async function pollHealthz(url: string): Promise<void> {
  for (;;) {
    const ok = await fetch(url).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) return;
    await new Promise((r) => setTimeout(r, 10));
  }
}
