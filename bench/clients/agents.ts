// A client process running real runner agents for the lease throughput scenario: each is the
// agent of `forelead runner` (src/runner/lifecycle/agent.ts) with its own certificate and HTTP/2
// connection, the process executor and the control-plane output, as `forelead runner --executor
// process` wires them, so a job costs what it costs the agent: its claim (complete-and-claim once
// it has a job), its job directory and input file, a child process (`true`), its output streams and
// its completion. Each agent stops once it has been idle for a moment (idleExitMs): the queue is
// drained. Run by bench/lib/fork.ts.
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import { join } from "node:path";
import { architecture } from "../../src/cli/runner.js";
import { createProcessExecutor } from "../../src/runner/executors/process-executor.js";
import { startRunnerAgent } from "../../src/runner/lifecycle/agent.js";
import { createControlPlaneOutput } from "../../src/runner/output/control-plane-output.js";
import { createRunnerClient } from "../../src/runner/transport/client.js";
import { createRestTransport } from "../../src/runner/transport/rest-transport.js";
import { serveRequests, type Message } from "../lib/fork.js";
import type { RunnerSpec } from "./runners.js";

/** How long an agent waits with no job before it stops: the end of the queue, not a pause in it. */
const idleExitMs = 2_000;

serveRequests(async (m) => {
  if (m.type !== "run") throw new Error(`unknown request ${m.type}`);
  return run(m);
});

async function run(m: Message): Promise<Message> {
  const urls = m.urls as string[];
  const caPem = m.caPem as string;
  const specs = m.runners as RunnerSpec[];
  const workDir = await mkdtemp(join(os.tmpdir(), "forelead-bench-agents-"));
  const warnings: string[] = [];
  try {
    const agents = await Promise.all(
      specs.map((spec, i) => {
        const transport = createRestTransport(urls[i % urls.length]!, () => ({
          ca: caPem,
          cert: spec.certPem,
          key: spec.keyPem,
        }));
        const client = createRunnerClient(transport, spec.runnerId, spec.workspaceId);
        const warn = (message: string) =>
          void (warnings.length < 5 && warnings.push(`${spec.runnerId}: ${message}`));
        return startRunnerAgent({
          client,
          // The control plane is measured, not job sandboxes: no network namespace per job.
          executor: createProcessExecutor({ network: "host" }),
          output: createControlPlaneOutput(client, { warn }),
          slots: 1,
          labels: ["linux"],
          capacity: { cpu: os.availableParallelism(), memoryBytes: os.totalmem() },
          architecture: architecture(os.arch()),
          os: os.platform(),
          executionKind: "process",
          workDir: join(workDir, spec.runnerId),
          sampleIntervalMs: 0,
          inventoryIntervalMs: 3_600_000,
          claimWaitSeconds: 1,
          idleExitMs,
          log: () => {},
        });
      }),
    );
    const ends = await Promise.all(agents.map((a) => a.stopped));
    const failures = ends
      .filter((e) => e.reason === "failed")
      .map((e) => e.failure?.message ?? "failed");
    return {
      type: "ran",
      settled: ends.reduce((n, e) => n + e.settled, 0),
      failures: failures.slice(0, 5),
      warnings,
      idleExitMs,
    };
  } finally {
    await rm(workDir, { recursive: true, force: true });
  }
}
