// Scenario 2, pickup latency: 64 runners wait in long-poll claims; jobs are
// enqueued one at a time at a steady rate through the admin REST route; the
// latency of a job is from sending its enqueue to its lease reaching a
// runner. Beside it, graphile-worker with 64 workers waiting, add_job → task
// start, measured the same way. Run: npm run bench:pickup
import { startPlanes } from "./lib/control-planes.js";
import { startCpuMeter } from "./lib/cpu.js";
import { freshDatabase } from "./lib/database.js";
import { forkProcess } from "./lib/fork.js";
import { postmasterPid } from "./lib/machine.js";
import { intFlag, parseOptions } from "./lib/options.js";
import { graphilePickup } from "./lib/peers.js";
import { createBenchPki } from "./lib/pki.js";
import { publishScenario } from "./lib/report.js";
import { summarize, type LatencySummary } from "./lib/stats.js";

const options = parseOptions(process.argv.slice(2), {
  jobs: "string",
  runners: "string",
  rate: "string",
  warmup: "string",
});
const tiny = options.size === "tiny";
const jobs = intFlag(options.flags.jobs, "jobs", tiny ? 20 : 2000);
const runnerCount = intFlag(options.flags.runners, "runners", tiny ? 4 : 64);
const rate = intFlag(options.flags.rate, "rate", tiny ? 20 : 200, 1, 10_000);
/** Jobs sent first at the same rate and not counted: connection pools fill, code is compiled. */
const warmup = intFlag(options.flags.warmup, "warmup", tiny ? 5 : 200, 0);
const workspaceId = "w1";
/**
 * Time for every runner's first claim to reach its wait (every worker to start) before the first
 * job.
 */
const settleMs = tiny ? 300 : 1000;

interface Pickup {
  readonly system: string;
  /** Enqueue sent → lease (task start) seen. */
  readonly latency: LatencySummary;
  /** Enqueue sent → enqueue acknowledged. */
  readonly enqueue: LatencySummary;
  /** p50 over each tenth of the jobs in enqueue order: a backlog shows as a bulge. */
  readonly p50ByTenth: readonly number[];
  /** p50 of the warm-up jobs, not counted in the others. */
  readonly warmupP50: number;
  readonly cpu: unknown;
}

/** The figures of the jobs after the warm-up. */
function measured(
  system: string,
  latencies: readonly number[],
  enqueueLatencies: readonly number[],
  cpu: unknown,
): Pickup {
  const counted = latencies.slice(warmup);
  return {
    system,
    latency: summarize(counted),
    enqueue: summarize(enqueueLatencies.slice(warmup)),
    p50ByTenth: byTenth(counted),
    warmupP50: summarize(latencies.slice(0, warmup)).p50,
    cpu,
  };
}

function byTenth(latencies: readonly number[]): number[] {
  const size = Math.max(1, Math.ceil(latencies.length / 10));
  return Array.from(
    { length: Math.ceil(latencies.length / size) },
    (_, i) => summarize(latencies.slice(i * size, (i + 1) * size)).p50,
  );
}

const started = performance.now();
const postmaster = await postmasterPid(options.databaseUrl);
const results: Pickup[] = [];

const pki = await createBenchPki();
try {
  // The runners as bare REST clients (claim, complete, claim again), then as the runner agent makes
  // its requests (each completion also waits for the next lease), then each again without the
  // direct handoff (src/broker/leases/handoff.ts), to show what it buys: one fresh database each.
  const rows = [
    ["ours (REST long-poll, 1 process)", false, true],
    ["ours (complete-and-claim long-poll, 1 process)", true, true],
    ["ours (REST long-poll, no handoff)", false, false],
    ["ours (complete-and-claim long-poll, no handoff)", true, false],
  ] as const;
  // First a round that is not reported: the process that runs the control plane starts cold (JIT,
  // first statements), and measured, whichever row came first paid for it (docs/performance.md,
  // section 2).
  for (const [system, next, handoff, total] of [
    ["warm-up round, not reported", false, true, warmup + Math.min(jobs, 500)] as const,
    ...rows.map(([s, n, h]) => [s, n, h, warmup + jobs] as const),
  ]) {
    console.log(
      `pickup-latency: ${system}, ${runnerCount} runners waiting, ${total - warmup} jobs at ${rate}/s`,
    );
    const database = await freshDatabase(options.databaseUrl, options.databaseName);
    const client = forkProcess(new URL("./clients/runners.ts", import.meta.url));
    try {
      const planes = await startPlanes({
        pki,
        database: database.location,
        mode: "in-process",
        count: 1,
        handoff,
      });
      try {
        const runners = await pki.runners("p", runnerCount, workspaceId);
        await client.call({
          type: "connect",
          urls: planes.urls,
          caPem: pki.ca.certPem,
          runners,
          admin: pki.admin,
        });
        const meter = startCpuMeter({ server: planes.pids, client: [client.pid] }, postmaster);
        const { latencies, enqueueLatencies } = await client.call<{
          latencies: number[];
          enqueueLatencies: number[];
        }>({ type: "pickup", total, ratePerSecond: rate, workspaceId, settleMs, next });
        const cpu = meter.stop();
        if (system !== "warm-up round, not reported")
          results.push(measured(system, latencies, enqueueLatencies, cpu));
      } finally {
        await client.close();
        await planes.close();
      }
    } finally {
      await database.drop();
    }
  }
} finally {
  await pki.dispose();
}

if (options.databaseUrl) {
  console.log(
    `pickup-latency: graphile-worker, concurrency ${runnerCount}, ${jobs} jobs at ${rate}/s`,
  );
  const gw = await freshDatabase(options.databaseUrl, options.databaseName);
  try {
    const meter = startCpuMeter({ server: [process.pid] }, postmaster);
    const { latencies, enqueueLatencies } = await graphilePickup(
      gw.location,
      warmup + jobs,
      rate,
      runnerCount,
      settleMs,
    );
    results.push(
      measured("graphile-worker (LISTEN/NOTIFY)", latencies, enqueueLatencies, meter.stop()),
    );
  } finally {
    await gw.drop();
  }
}

const notes = [
  `${jobs.toLocaleString("en-US")} jobs enqueued one at a time, ${rate} ` +
    `per second on a fixed schedule (each sent when due, whatever the ` +
    `previous one is doing), while ${runnerCount} runners (or workers) wait; ` +
    `${warmup} more jobs go first, at the same rate, and are not counted ` +
    `(pools fill, code is compiled). Before our rows, one round of ` +
    `${Math.min(jobs, 500)} jobs is run and not reported, so no row pays for ` +
    `the process's cold start.`,
  "Ours: latency from sending POST /v1/admin/jobs to the claim reply with " +
    "that job arriving at a runner, both in one client process (one clock); " +
    "the control plane runs in the orchestrating process. An enqueue that " +
    "finds a claim waiting leases the job to it in its own statement (the " +
    "direct handoff); otherwise the claim waits on Postgres LISTEN/NOTIFY: " +
    "one notification wakes one waiting claim.",
  "Ours, no handoff: the same with the direct handoff turned off (every " +
    "job reaches its runner through the enqueue's NOTIFY and a claim " +
    "statement), for the comparison in one run.",
  "Ours, complete-and-claim: each runner's completion also asks for its " +
    "next lease and waits up to 20 s for it (CompleteRequest.next), as the " +
    "runner agent does; the lease arrives in the completion's reply. The " +
    "bare REST row completes, then claims again.",
  "graphile-worker: latency from calling addJob to its task function " +
    "starting, both in one process (its workers wait on LISTEN/NOTIFY too).",
  "Ours crosses two HTTP/2 + TLS hops (enqueue in, lease out) and four " +
    "processes (client, control plane, Postgres, back); graphile-worker " +
    "stays in one process beside Postgres. The machine has 2 cores shared by " +
    "all of them.",
];
if (!options.databaseUrl)
  notes.push(
    "No DATABASE_URL: ours ran on the embedded database; graphile-worker needs a Postgres server and was skipped.",
  );

await publishScenario(options, started, {
  scenario: "pickup-latency",
  title: "Pickup latency",
  notes,
  table: {
    title: `Pickup latency: enqueue → lease, ${jobs.toLocaleString("en-US")} jobs at ${rate}/s, ${runnerCount} waiting`,
    columns: ["system", "p50 ms", "p90 ms", "p99 ms", "max ms", "enqueue ack p50 ms"],
    rows: results.map((r) => [
      r.system,
      r.latency.p50,
      r.latency.p90,
      r.latency.p99,
      r.latency.max,
      r.enqueue.p50,
    ]),
  },
  figures: { jobs, warmup, runners: runnerCount, ratePerSecond: rate, results },
});
