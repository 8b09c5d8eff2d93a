// Scenario: enqueue throughput through the admin REST routes, 32 requests in
// flight on one HTTP/2 + mTLS connection: single enqueues (POST
// /v1/admin/jobs, one job a request) against batches (POST
// /v1/admin/jobs:batch, 1,000 jobs a request), jobs/s and their ratio, in
// one run. Run: node --import tsx bench/enqueue-throughput.ts [--singles N]
// [--batches N] [--batch-size N] [--in-flight N]
import { startPlanes } from "./lib/control-planes.js";
import { startCpuMeter } from "./lib/cpu.js";
import { freshDatabase } from "./lib/database.js";
import { forkProcess } from "./lib/fork.js";
import { postmasterPid } from "./lib/machine.js";
import { intFlag, parseOptions } from "./lib/options.js";
import { createBenchPki } from "./lib/pki.js";
import { publishScenario } from "./lib/report.js";
import { ratio, round, summarize } from "./lib/stats.js";

const options = parseOptions(process.argv.slice(2), {
  singles: "string",
  batches: "string",
  "batch-size": "string",
  "in-flight": "string",
});
const tiny = options.size === "tiny";
const singles = intFlag(options.flags.singles, "singles", tiny ? 32 : 10_000);
const batchSize = intFlag(options.flags["batch-size"], "batch-size", tiny ? 100 : 1000, 2, 1000);
const batches = intFlag(options.flags.batches, "batches", tiny ? 2 : 100);
/** Single enqueues sent first and not counted. */
const warmup = tiny ? 8 : 200;
const inFlight = intFlag(options.flags["in-flight"], "in-flight", tiny ? 8 : 32, 1, 1000);

interface Run {
  readonly system: string;
  readonly jobs: number;
  readonly requests: number;
  readonly seconds: number;
  readonly jobsPerSecond: number;
  readonly requestP50Ms: number;
  readonly requestP99Ms: number;
  readonly cpu: unknown;
}

const started = performance.now();
const postmaster = await postmasterPid(options.databaseUrl);
const runs: Run[] = [];
console.log(
  `enqueue-throughput: ${singles} single enqueues, then ${batches} batches ` +
    `of ${batchSize}, ${inFlight} requests in flight`,
);
const pki = await createBenchPki();
const database = await freshDatabase(options.databaseUrl, options.databaseName);
const client = forkProcess(new URL("./clients/enqueuers.ts", import.meta.url));
try {
  const planes = await startPlanes({
    pki,
    database: database.location,
    mode: "in-process",
    count: 1,
  });
  try {
    await client.call({
      type: "connect",
      url: planes.urls[0],
      caPem: pki.ca.certPem,
      admin: pki.admin,
    });
    // A short warm-up of both routes, not counted: pools fill, code is compiled.
    await client.call({
      type: "enqueue",
      total: warmup,
      batchSize: 1,
      inFlight,
      workspaceId: "warm",
    });
    await client.call({
      type: "enqueue",
      total: batchSize * 2,
      batchSize,
      inFlight: 2,
      workspaceId: "warm",
    });
    const measure = async (system: string, total: number, size: number, workspaceId: string) => {
      const meter = startCpuMeter({ server: planes.pids, client: [client.pid] }, postmaster);
      const r = await client.call<{
        seconds: number;
        stored: number;
        requests: number;
        latencies: number[];
      }>({ type: "enqueue", total, batchSize: size, inFlight, workspaceId });
      if (r.stored !== total) throw new Error(`${system}: ${r.stored} of ${total} jobs stored`);
      const latency = summarize(r.latencies);
      runs.push({
        system,
        jobs: total,
        requests: r.requests,
        seconds: round(r.seconds),
        jobsPerSecond: Math.round(total / r.seconds),
        requestP50Ms: latency.p50,
        requestP99Ms: latency.p99,
        cpu: meter.stop(),
      });
    };
    await measure("single enqueue (POST /v1/admin/jobs)", singles, 1, "singles");
    await measure(
      `batches of ${batchSize.toLocaleString("en-US")} (POST /v1/admin/jobs:batch)`,
      batches * batchSize,
      batchSize,
      "batches",
    );
  } finally {
    await client.close();
    await planes.close();
  }
} finally {
  await database.drop();
  await pki.dispose();
}

const base = runs[0]!.jobsPerSecond;
await publishScenario(options, started, {
  scenario: "enqueue-throughput",
  title: "Enqueue throughput",
  notes: [
    `One client process, one HTTP/2 + mTLS connection as the test admin, ` +
      `${inFlight} requests in flight; the control plane runs in the ` +
      `orchestrating process. ${singles.toLocaleString("en-US")} jobs as ` +
      `single enqueues, then ${(batches * batchSize).toLocaleString("en-US")} ` +
      `as ${batches} batches of ${batchSize.toLocaleString("en-US")}; each run ` +
      `into its own workspace, after a warm-up of both routes that is not ` +
      `counted.`,
    "A batch is one transaction: every job by the single enqueue's rules, " +
      "one multi-row insert with its job.queued events, one NOTIFY per " +
      "workspace, one audit record (docs/cli.md, Batch enqueue). A single " +
      "enqueue is one statement and one commit.",
    "jobs/s counts jobs acknowledged (stored and committed) over the run's " +
      "wall time; the ratio is each row's jobs/s over the single enqueue's, in " +
      "this run.",
    ...(options.databaseUrl ? [] : ["No DATABASE_URL: ran on the embedded database."]),
  ],
  table: {
    title: `Enqueue throughput: admin REST, ${inFlight} in flight`,
    columns: [
      "system",
      "jobs",
      "requests",
      "jobs/s",
      "request p50 ms",
      "request p99 ms",
      "× single",
    ],
    rows: runs.map((r) => [
      r.system,
      r.jobs,
      r.requests,
      r.jobsPerSecond,
      r.requestP50Ms,
      r.requestP99Ms,
      ratio(r.jobsPerSecond, base),
    ]),
  },
  figures: { singles, batches, batchSize, inFlight, runs },
});
