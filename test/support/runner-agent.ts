import { mkdtemp, rm, writeFile } from "node:fs/promises";
import type { Lease } from "../../gen/forelead/runner/v1/job_pb.js";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startRunnerAgent, type RunnerAgent } from "../../src/runner/lifecycle/agent.js";
import { createRunnerClient, type RunnerClient } from "../../src/runner/transport/client.js";
import { createDockerClient } from "../../src/runner/executors/docker-api.js";
import { createDockerExecutor } from "../../src/runner/executors/docker-executor.js";
import type { Executor } from "../../src/runner/executors/executor.js";
import { createControlPlaneOutput } from "../../src/runner/output/control-plane-output.js";
import type { JobEvent, LogLine, OutputSink } from "../../src/runner/output/output.js";
import { createProcessExecutor } from "../../src/runner/executors/process-executor.js";
import type { JobNetwork } from "../../src/runner/executors/isolation.js";
import { protocolCheckout } from "../../src/runner/checkout/protocol-checkout.js";
import { createRunnerProtocol } from "../../src/runner/transport/protocol-client.js";
import { createRestTransport } from "../../src/runner/transport/rest-transport.js";
import { eventually } from "./actors.js";
import type { TestControlPlane } from "./control-plane.js";

/** The executors a runner can use. */
export type ExecutorKind = "docker" | "process";

/** The image docker-executor tests run: made by scripts/ci/docker.sh with `docker import`. */
export const testImage = "forelead-test/busybox:latest";

/** Whether a Docker engine answers here. */
async function dockerAnswers(): Promise<boolean> {
  try {
    await createDockerClient().ping();
    return true;
  } catch {
    return false;
  }
}

/**
 * The executors to test: process always; docker when an engine answers, and
 * in CI (CI=true) always, so a missing engine fails there instead of skipping.
 */
export async function executorsUnderTest(): Promise<ExecutorKind[]> {
  if (await dockerAnswers()) return ["process", "docker"];
  if (process.env.CI) return ["process", "docker"];
  console.warn(
    "runner tests: no Docker engine answers (run scripts/ci/docker.sh " +
      "start); docker-executor tests are skipped outside CI",
  );
  return ["process"];
}

/** What the agent would have sent for one lease: its own output boundary, recorded. */
interface RecordedJob {
  readonly leaseTokens: string[];
  readonly logs: LogLine[];
  readonly events: JobEvent[];
}

/** An output sink that records every job's lines and events in order. */
function recordingOutput(): OutputSink & {
  readonly jobs: Map<string, RecordedJob>;
  job(jobId: string): RecordedJob;
} {
  const jobs = new Map<string, RecordedJob>();
  const job = (jobId: string) => {
    let j = jobs.get(jobId);
    if (!j) jobs.set(jobId, (j = { leaseTokens: [], logs: [], events: [] }));
    return j;
  };
  return {
    jobs,
    job,
    open(lease) {
      const j = job(lease.jobId);
      j.leaseTokens.push(lease.leaseToken);
      return {
        log: (l) => j.logs.push(l),
        event: (e) => j.events.push(e),
        flush: async () => {},
        abandon: () => {},
      };
    },
  };
}

/**
 * Sends every job's output to each of `sinks`: here the control plane (the shipped runner's only
 * sink) and the record the tests read.
 */
function teeOutput(...sinks: readonly OutputSink[]): OutputSink {
  return {
    open(lease) {
      const outputs = sinks.map((s) => s.open(lease));
      return {
        log: (line) => outputs.forEach((o) => o.log(line)),
        event: (event) => outputs.forEach((o) => o.event(event)),
        flush: async () => {
          await Promise.all(outputs.map((o) => o.flush()));
        },
        abandon: () => outputs.forEach((o) => o.abandon()),
      };
    },
  };
}

/** A runner agent running in the test process against a test control plane. */
export interface TestRunner {
  readonly agent: RunnerAgent;
  readonly client: RunnerClient;
  readonly recorded: ReturnType<typeof recordingOutput>;
  /** The agent's operator log lines. */
  readonly log: string[];
  readonly workDir: string;
  readonly executor: Executor;
  /** Waits until job `jobId` has written a log line matching `pattern`. */
  waitForLine(jobId: string, pattern: RegExp): Promise<LogLine>;
  /** Stops the agent (releasing what runs) and removes its work dir. */
  close(): Promise<void>;
}

/** Options of a test runner. */
export interface TestRunnerOptions {
  readonly runnerId: string;
  readonly workspaceId: string;
  readonly executor: ExecutorKind;
  readonly slots?: number;
  readonly labels?: string[];
  readonly graceMs?: number;
  /**
   * How often running jobs' CPU and memory are sent (resource.sample events); 0, none, when absent,
   * so tests that list a job's events exactly are not timing-dependent. samples.test.ts asks for
   * them.
   */
  readonly sampleIntervalMs?: number;
  /** The control plane URL, when it differs from cp.url. */
  readonly url?: string;
  /**
   * Changes each lease the agent claims before it runs it (e.g. adds secrets, to test the runner's
   * side alone).
   */
  readonly onLease?: (lease: Lease) => void;
  /**
   * Give the agent the suspend routes, so it declares checkpoint-v1 and input-v1 (docs/suspend.md).
   */
  readonly suspends?: boolean;
  /** The agent's work directory; a fresh temporary one, removed at close, when absent. */
  readonly workDir?: string;
  /** The process executor's --job-network; its default (private) when absent, as root. */
  readonly jobNetwork?: JobNetwork;
  /**
   * Changes the client the agent calls through (e.g. one whose watch answers as a control plane
   * without the route, for bench/cancel-latency.ts's renewal-only figures).
   */
  readonly wrapClient?: (client: RunnerClient) => RunnerClient;
}

/**
 * Starts an in-process agent with a runner certificate made by the test PKI; output goes to the
 * control plane and a recording.
 */
export async function startTestRunner(
  cp: TestControlPlane,
  options: TestRunnerOptions,
): Promise<TestRunner> {
  const cert = await cp.pki.runner(options.runnerId, options.workspaceId);
  const tls = () => ({ ca: cp.pki.ca.certPem, cert: cert.certPem, key: cert.keyPem });
  const transport = createRestTransport(options.url ?? cp.url, tls);
  const protocol = createRunnerProtocol(options.url ?? cp.url, tls);
  const base = createRunnerClient(transport, options.runnerId, options.workspaceId);
  const onLease = options.onLease;
  const client: RunnerClient = !onLease
    ? base
    : {
        ...base,
        claim: async (waitSeconds, signal, maxLeases) => {
          const leases = await base.claim(waitSeconds, signal, maxLeases);
          leases.forEach(onLease);
          return leases;
        },
        // A completion's reply may carry the next lease (CompleteRequest.next).
        complete: async (jobId, leaseToken, completion, next) => {
          const reply = await base.complete(jobId, leaseToken, completion, next);
          if (reply.lease) onLease(reply.lease);
          return reply;
        },
      };
  const workDir =
    options.workDir ?? (await mkdtemp(join(tmpdir(), `forelead-runner-${options.runnerId}-`)));
  const log: string[] = [];
  const say = (m: string) => log.push(m);
  const executor =
    options.executor === "docker"
      ? createDockerExecutor({ runnerId: options.runnerId, workspaceId: options.workspaceId })
      : createProcessExecutor({
          // Not root: no namespaces to be had, so the host's network, as an operator would ask.
          network: options.jobNetwork ?? (process.getuid?.() === 0 ? undefined : "host"),
          log: say,
        });
  const recorded = recordingOutput();
  const agent = await startRunnerAgent({
    client: options.wrapClient ? options.wrapClient(client) : client,
    executor,
    output: teeOutput(recorded, createControlPlaneOutput(client, { warn: say })),
    slots: options.slots ?? 1,
    labels: options.labels ?? ["linux"],
    capacity: { cpu: 2, memoryBytes: 4 * 1024 ** 3 },
    architecture: "amd64",
    os: process.platform,
    executionKind: options.executor,
    workDir,
    graceMs: options.graceMs ?? 1000,
    sampleIntervalMs: options.sampleIntervalMs ?? 0,
    claimWaitSeconds: 5,
    checkout: protocolCheckout(protocol.client),
    uploads: protocol.client,
    suspends: options.suspends ? protocol.suspendClient : undefined,
    inputs: protocol.client,
    log: say,
  });
  return {
    agent,
    client,
    recorded,
    log,
    workDir,
    executor,
    waitForLine: (jobId, pattern) =>
      eventually(`a log line of job ${jobId} matching ${pattern}`, async () =>
        recorded.jobs.get(jobId)?.logs.find((l) => pattern.test(l.text)),
      ),
    async close() {
      await agent.stop();
      await client.close();
      protocol.close();
      await rm(workDir, { recursive: true, force: true });
    },
  };
}

/**
 * A job spec for `executor`: the docker test image, or any image name for the process executor
 * (which ignores it).
 */
export function specFor(
  executor: ExecutorKind,
  spec: Record<string, unknown>,
): Record<string, unknown> {
  return { image: executor === "docker" ? testImage : "busybox", timeoutSeconds: 60, ...spec };
}

/** Writes a runner certificate and the CA to files, for a runner started as a child process. */
export async function runnerCertificateFiles(
  cp: TestControlPlane,
  runnerId: string,
  workspaceId: string,
  dir: string,
): Promise<{ ca: string; cert: string; key: string }> {
  const issued = await cp.pki.runner(runnerId, workspaceId);
  const files = {
    ca: join(dir, "ca.pem"),
    cert: join(dir, `${runnerId}.pem`),
    key: join(dir, `${runnerId}-key.pem`),
  };
  await writeFile(files.ca, cp.pki.ca.certPem);
  await writeFile(files.cert, issued.certPem);
  await writeFile(files.key, issued.keyPem, { mode: 0o600 });
  return files;
}
