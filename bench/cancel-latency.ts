// Cancel latency (issue 46): from the admin's cancel call to the job's process receiving SIGTERM.
// One control plane and one runner agent (process executor) in this process, leases of the
// default 30 s (renewals every 10 s). Each job traps TERM and prints the time it got it
// (`date +%s%N`); the latency is that time minus the time the cancel call began, one
// machine, one clock. Two modes, the same jobs:
//   watch     the runner keeps POST /v1/runner/watch open (the shipped agent);
//   renewal   the runner's watch answers as a control plane without the route (404 "no route"),
//             so cancels arrive with renewals only: the agent as it was before the watch.
// Each cancel is made a random time after the job printed "ready" (uniform within one renewal
// interval for renewal, within a second for watch), so a cancel lands anywhere in the renewal
// cycle. Run: npm run bench:cancel [-- --cancels 30 --parallel 5 --modes watch,renewal]
import { adminActor, eventually } from "../test/support/actors.js";
import { startTestControlPlane } from "../test/support/control-plane.js";
import { specFor, startTestRunner, type TestRunner } from "../test/support/runner-agent.js";
import { RunnerApiError, type RunnerClient } from "../src/runner/transport/client.js";
import { intFlag, parseOptions } from "./lib/options.js";
import { publishScenario } from "./lib/report.js";
import { round, summarize, type LatencySummary } from "./lib/stats.js";

const options = parseOptions(process.argv.slice(2), {
  cancels: "string",
  parallel: "string",
  modes: "string",
});
const tiny = options.size === "tiny";
const cancels = intFlag(options.flags.cancels, "cancels", tiny ? 4 : 30);
const parallel = intFlag(options.flags.parallel, "parallel", tiny ? 2 : 5, 1, 32);
const modes = String(options.flags.modes ?? "watch,renewal").split(",") as Array<
  "watch" | "renewal"
>;
for (const mode of modes)
  if (mode !== "watch" && mode !== "renewal")
    throw new Error(`--modes: watch and/or renewal; got ${JSON.stringify(mode)}`);
const leaseSeconds = 30;
const renewIntervalMs = (leaseSeconds * 1000) / 3;

/** A client whose watch is refused as a control plane without the route refuses it. */
function withoutWatch(client: RunnerClient): RunnerClient {
  return {
    ...client,
    watch: () =>
      Promise.reject(
        new RunnerApiError(
          "POST /v1/runner/watch",
          404,
          "not_found",
          "no route POST /v1/runner/watch",
        ),
      ),
  };
}

interface Row {
  readonly mode: string;
  readonly latency: LatencySummary;
  readonly samples: readonly number[];
}

const started = performance.now();
const cp = await startTestControlPlane({ leaseSeconds });
const admin = await adminActor(cp);
const rows: Row[] = [];
try {
  for (const mode of modes) {
    const workspaceId = `cancel-${mode}`;
    const runner: TestRunner = await startTestRunner(cp, {
      runnerId: `cancel-${mode}`,
      workspaceId,
      executor: "process",
      slots: parallel,
      wrapClient: mode === "renewal" ? withoutWatch : undefined,
    });
    const samples: number[] = [];
    let next = 0;
    const one = async () => {
      // A line, not a file: the job may run in its own mount namespace (its own /tmp).
      const script = `trap 'echo "term $(date +%s%N)"; exit 143' TERM; echo ready; while :; do sleep 0.05; done`;
      const reply = await admin.enqueue({
        workspaceId,
        spec: specFor("process", { argv: ["sh", "-c", script], timeoutSeconds: 300 }),
      });
      if (reply.status !== 200) throw new Error(`enqueue: ${reply.status} ${reply.text}`);
      const jobId: string = reply.json.job.id;
      await runner.waitForLine(jobId, /^ready$/);
      const spread = mode === "renewal" ? renewIntervalMs : 1000;
      await new Promise((r) => setTimeout(r, Math.random() * spread));
      const cancelledAt = performance.timeOrigin + performance.now();
      const cancel = await admin.cancel(jobId);
      if (cancel.status !== 200) throw new Error(`cancel: ${cancel.status} ${cancel.text}`);
      const termNs = await eventually(
        `job ${jobId} to get SIGTERM`,
        async () =>
          runner.recorded
            .job(jobId)
            .logs.map((l) => /^term (\d+)$/.exec(l.text)?.[1])
            .find(Boolean),
        2 * renewIntervalMs + 10_000,
        20,
      );
      samples.push(Number(BigInt(termNs) / 1000n) / 1000 - cancelledAt);
      await eventually(
        `job ${jobId} to settle`,
        async () => ((await admin.job(jobId)).json.job.state === "running" ? undefined : true),
        30_000,
      );
    };
    await Promise.all(
      Array.from({ length: parallel }, async () => {
        while (next++ < cancels) await one();
      }),
    );
    await runner.close();
    rows.push({ mode, latency: summarize(samples), samples: samples.map((s) => round(s, 1)) });
    console.log(`${mode}: ${JSON.stringify(summarize(samples))}`);
  }
} finally {
  await admin.close();
  await cp.close();
}

await publishScenario(options, started, {
  scenario: options.databaseUrl ? "cancel-latency" : "cancel-latency-embedded",
  title: `Cancel latency: cancel call → the job's process gets SIGTERM (${cancels} cancels a mode)`,
  notes: [
    `leases of ${leaseSeconds} s (renewals every ${renewIntervalMs / 1000} s); ${parallel} jobs at a time on one runner; process executor`,
    "renewal: the watch refused as by a control plane without the route, so cancels come with renewals",
  ],
  table: {
    title: "Cancel latency (ms)",
    columns: ["cancels reach the runner by", "cancels", "p50", "p90", "p99", "max"],
    rows: rows.map((r) => [
      r.mode === "watch" ? "watch (POST /v1/runner/watch)" : "renewal only (before)",
      r.latency.count,
      round(r.latency.p50, 1),
      round(r.latency.p90, 1),
      round(r.latency.p99, 1),
      round(r.latency.max, 1),
    ]),
  },
  figures: { leaseSeconds, parallel, rows },
});
