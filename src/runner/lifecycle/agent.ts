import { mkdir, rm } from "node:fs/promises";
import { prepareWorkDir } from "./work-dir.js";
import { join } from "node:path";
import type { CheckoutStep } from "../checkout/checkout-step.js";
import { RunnerApiError, type RunnerClient, type RunnerInstance } from "../transport/client.js";
import { fixOf } from "../transport/failures.js";
import { measureClockOffset, serverClock, type ServerClock } from "./clock.js";
import type { Executor, RunnerCapacity } from "../executors/executor.js";
import { removeLeftoverSecretFiles } from "../executors/secret-files.js";
import { startInventory, type InventoryLoop } from "./inventory.js";
import { runLease, type JobRun } from "./job-run.js";
import { startNoticeWatch } from "./notice-watch.js";
import type { OutputSink } from "../output/output.js";
import { sleep, type NextLease } from "./settle.js";
import { maxLeasesPerClaim } from "../../protocol/claims.js";
import type { Lease } from "../../../gen/forelead/runner/v1/job_pb.js";
import type { UploadClient } from "../output/upload-output.js";
import type { SuspendClient } from "./suspend-step.js";
import { features, jobContractFeatures, suspendFeatures } from "../../protocol/features.js";
import type { InputClient } from "./input-step.js";

/** Everything the agent runs with. */
export interface RunnerAgentOptions {
  readonly client: RunnerClient;
  readonly executor: Executor;
  readonly output: OutputSink;
  readonly slots: number;
  readonly labels: readonly string[];
  readonly capacity: RunnerCapacity;
  /** "amd64", "arm64", ... */
  readonly architecture: string;
  /** "linux", "darwin", ... (node's os.platform()); sent as a capability jobs may require. */
  readonly os?: string;
  /** How the executor runs jobs, "docker" or "process"; sent as a capability jobs may require. */
  readonly executionKind?: string;
  /** This runner's own directory: job directories live in `jobs/` under it. */
  readonly workDir: string;
  /** TERM-to-KILL grace for cancel, timeout and forced shutdown; 10 s by default. */
  readonly graceMs?: number;
  /** Longest claim long-poll, 0..20 s; 20 by default. */
  readonly claimWaitSeconds?: number;
  /**
   * Puts checkout and agent jobs' code in place (e.g. protocolCheckout); without it such jobs are
   * refused as incompatible.
   */
  readonly checkout?: CheckoutStep;
  /**
   * Where each job's output directory is uploaded before it is completed; without it, output files
   * are not kept.
   */
  readonly uploads?: () => Promise<UploadClient>;
  /**
   * The suspend routes: with them (and uploads) the runner declares checkpoint-v1 and input-v1 and
   * suspends jobs that ask for input (docs/suspend.md).
   */
  readonly suspends?: () => Promise<SuspendClient>;
  /**
   * Where pipeline steps' inputs are downloaded from (the protocol client); without it, jobs with
   * inputs are refused.
   */
  readonly inputs?: () => Promise<InputClient>;
  /**
   * How often each running job's CPU and memory are sent (resource.sample events); 5 s by default,
   * 0 for never.
   */
  readonly sampleIntervalMs?: number;
  /** Inventory report interval; 15 s by default. */
  readonly inventoryIntervalMs?: number;
  /** The operator's log: one line per call, never a lease token. */
  readonly log?: (message: string) => void;
  /**
   * This process, sent with the registration: the control plane refuses a second live process of
   * one runner identity.
   */
  readonly instance?: RunnerInstance;
  /** The runner's version, sent with the registration (runners list shows it). */
  readonly version?: string;
  /**
   * Claim this many jobs, then drain and stop (`forelead runner --once`: 1, whatever the slots).
   */
  readonly jobLimit?: number;
  /**
   * Drain and stop after this long with no job running (`--idle-exit`); a claim's long-poll never
   * outlasts it.
   */
  readonly idleExitMs?: number;
}

/** Why the agent stopped, and what it did. */
export interface AgentEnd {
  /**
   * "drained" (drain or stop called), "drain-ordered" (an admin ordered it to drain: a claim or
   * renew reply said so), "job-limit" (jobLimit claims made and run), "idle"
   * (idleExitMs without a job), "failed" (a failure no retry cures).
   */
  readonly reason: "drained" | "drain-ordered" | "job-limit" | "idle" | "failed";
  /** Leases claimed. */
  readonly claimed: number;
  /** Jobs whose completion the control plane took. */
  readonly settled: number;
  /** The final failure, when reason is "failed": its message says what to fix. */
  readonly failure?: Error;
}

/**
 * Features this agent implements, registered as capabilities (src/protocol/features.ts): cancel-v1,
 * progress-v1, result-v1.
 */
const runnerFeatures: readonly string[] = [features.cancel, ...jobContractFeatures];

/** A running runner agent. */
export interface RunnerAgent {
  /** The estimated control-plane clock (after start). */
  readonly clock: ServerClock;
  /** Jobs running now. */
  runningJobs(): string[];
  /**
   * Resolves when the agent has stopped: after drain or stop, the job limit, the idle bound, or a
   * final failure.
   */
  readonly stopped: Promise<AgentEnd>;
  /** Stops claiming and lets running jobs finish; resolves when they have. */
  drain(): Promise<AgentEnd>;
  /** Stops claiming, stops running jobs and releases their leases. */
  stop(): Promise<void>;
  /** Reports inventory now (Docker); the reap orders obeyed. */
  reportInventory(): Promise<Array<{ kind: string; name: string }>>;
}

/**
 * Starts a runner agent: measures the clock offset, registers, then claims
 * (long-poll) while it has free slots and runs each lease. Resolves once
 * registered; a refusal to register (e.g. 403, or 409: another process
 * holds this runner identity) or a server it cannot verify rejects at once,
 * an unreachable control plane is retried. Later, a failure no retry cures
 * (failures.ts) stops the agent: running jobs are stopped and released.
 */
export async function startRunnerAgent(options: RunnerAgentOptions): Promise<RunnerAgent> {
  const { client, executor } = options;
  const log = options.log ?? ((m: string) => console.log(`forelead runner: ${m}`));
  const jobsDir = join(await prepareWorkDir(options.workDir), "jobs");
  await executor.prepare();

  const claiming = new AbortController();
  const forced = new AbortController();
  const runs = new Map<string, JobRun>();
  let draining = false;
  let slotFreed: () => void = () => {};
  let clock = serverClock(0n);
  let claimed = 0;
  let settled = 0;
  let idleSince = Date.now();
  let end: AgentEnd["reason"] = "drained";
  let failure: Error | undefined;

  const capabilities = {
    os: options.os,
    executionKinds: options.executionKind ? [options.executionKind] : undefined,
    // checkpoint-v1 and input-v1 (docs/suspend.md) when it can suspend jobs.
    features: options.suspends ? [...runnerFeatures, ...suspendFeatures] : runnerFeatures,
    maxConcurrency: options.slots,
  };
  const registration = (clockOffsetNs: bigint, draining: boolean) => ({
    slots: options.slots,
    cpu: options.capacity.cpu,
    memoryBytes: options.capacity.memoryBytes,
    architecture: options.architecture,
    labels: options.labels,
    clockOffsetNs,
    ...capabilities,
    instance: options.instance,
    version: options.version,
    draining,
  });
  let clockOffsetNs = 0n;
  const register = async () => {
    for (let attempt = 1; ; attempt++) {
      try {
        const offset = await measureClockOffset(() => client.clock());
        clock = serverClock(offset.offsetNs);
        clockOffsetNs = offset.offsetNs;
        await client.register(registration(offset.offsetNs, false));
        const instance = options.instance
          ? `instance ${options.instance.id} started ${options.instance.startedAt.toISOString()}, `
          : "";
        log(
          `registered as runner "${client.runnerId}" in workspace ` +
            `"${client.workspaceId}" (${instance}${options.slots} slots, labels ` +
            `${options.labels.join(",") || "none"}, clock offset ` +
            `${(Number(offset.offsetNs) / 1e6).toFixed(2)} ms ` +
            `±${(Number(offset.roundTripNs) / 2e6).toFixed(2)} ms)`,
        );
        return;
      } catch (err) {
        if ((err instanceof RunnerApiError && !err.transient) || fixOf(err)) throw err;
        if (claiming.signal.aborted) throw err;
        const waitMs = Math.min(10_000, 500 * attempt);
        log(`cannot register yet (${(err as Error).message}); retrying in ${waitMs} ms`);
        await sleep(waitMs, claiming.signal);
      }
    }
  };
  await register();
  // Only once registered: a second process of this runner is refused above, before it touches the
  // first one's jobs. What a crashed predecessor left: its leases are gone, so its jobs must not
  // run on.
  for (const stopped of await executor.recover(jobsDir))
    log(`stopped a leftover of an earlier run: ${stopped}`);
  for (const dir of await removeLeftoverSecretFiles(jobsDir))
    log(`removed the secret files an earlier run left in ${dir}`);
  await rm(jobsDir, { recursive: true, force: true });
  await mkdir(jobsDir, { recursive: true, mode: 0o711 });
  idleSince = Date.now(); // idle from here, however long registering took

  const context = () => ({
    client,
    executor,
    output: options.output,
    clock,
    capacity: options.capacity,
    jobsDir,
    graceMs: options.graceMs ?? 10_000,
    sampleIntervalMs: options.sampleIntervalMs,
    log,
    abort: forced.signal,
    checkout: options.checkout,
    uploads: options.uploads,
    suspends: options.suspends,
    inputs: options.inputs,
  });

  /**
   * Ends the claim loop for a failure no retry cures: running jobs are stopped and their leases
   * released.
   */
  const fail = (err: Error) => {
    end = "failed";
    failure = err;
    log(`stopping: ${fixOf(err) ?? err.message}`);
    forced.abort();
    for (const run of runs.values()) run.release();
  };

  /**
   * The claim's long-poll: never past the idle bound, so an idle runner stops on time without
   * abandoning a claim.
   */
  const claimWait = (): number | "idle" => {
    const longest = options.claimWaitSeconds ?? 20;
    if (options.idleExitMs === undefined) return longest;
    const idleFor = runs.size === 0 ? Date.now() - idleSince : 0;
    if (runs.size === 0 && idleFor >= options.idleExitMs) return "idle";
    return Math.min(longest, Math.ceil((options.idleExitMs - idleFor) / 1000));
  };

  // One watch while leases are held: a cancel reaches the run at once, not at its next renewal.
  const watch = startNoticeWatch({ client, runs, log });

  /**
   * Runs a lease just received (a claim's, or a completion's next): as the drain began, it is given
   * straight back instead. Each lease has its own run and its own keeper, so a lost one is killed.
   */
  const take = (lease: Lease, how: string) => {
    if (!lease.job) return;
    if (draining) {
      void client.release(lease.job.id, lease.token).catch(() => undefined);
      return;
    }
    log(`${how} job ${lease.job.id}`);
    claimed++;
    const run = runLease({ ...context(), next }, lease);
    runs.set(run.jobId, run);
    watch.leaseTaken();
    void run.done
      .then((took) => void (took && settled++))
      .finally(() => {
        runs.delete(run.jobId);
        if (runs.size === 0) idleSince = Date.now();
        slotFreed();
      });
  };
  // A finished job's completion asks for the next lease while the runner takes more jobs: not
  // draining, and without a job limit (--once), which the claim loop alone counts out.
  const next: NextLease = {
    wanted: () => !draining && options.jobLimit === undefined,
    take: (lease) => take(lease, "claimed (with a completion)"),
  };

  const claimLoop = async () => {
    let failures = 0;
    while (!draining) {
      if (options.jobLimit !== undefined && claimed >= options.jobLimit) {
        end = "job-limit";
        log(
          `claimed ${claimed} job(s), the most this runner takes; stopping once ` +
            `${runs.size === 1 ? "it is" : "they are"} settled`,
        );
        break;
      }
      if (runs.size >= options.slots) {
        await new Promise<void>((resolve) => (slotFreed = resolve));
        continue;
      }
      const waitSeconds = claimWait();
      if (waitSeconds === "idle") {
        end = "idle";
        log(`no job for ${Math.round(options.idleExitMs! / 1000)} s (--idle-exit); stopping`);
        break;
      }
      try {
        // Up to the free slots in one request (ClaimLeases); at most what the job limit leaves.
        const free = Math.min(
          options.slots - runs.size,
          options.jobLimit === undefined ? Infinity : options.jobLimit - claimed,
        );
        const leases = await client.claim(
          waitSeconds,
          claiming.signal,
          Math.min(free, maxLeasesPerClaim),
        );
        failures = 0;
        if (leases.length > 1) log(`one claim request leased ${leases.length} jobs`);
        for (const lease of leases) take(lease, "claimed");
        if (draining) break;
      } catch (err) {
        if (draining) break;
        if (fixOf(err)) {
          fail(err as Error);
          break;
        }
        if (err instanceof RunnerApiError && err.code === "failed_precondition") {
          log(`the control plane does not know this runner (${err.message}); registering again`);
          const refused = await register().then(
            () => undefined,
            (e: Error) => (log(`registering again failed: ${e.message}`), e),
          );
          if (refused && fixOf(refused)) {
            fail(refused);
            break;
          }
          continue;
        }
        failures++;
        const waitMs = Math.min(10_000, 250 * 2 ** Math.min(failures, 6));
        log(`claim failed (${(err as Error).message}); retrying in ${waitMs} ms`);
        await sleep(waitMs, claiming.signal);
      }
    }
  };

  // An admin's drain order (POST /v1/admin/runners/{runnerId}/drain): as a drain() called here.
  client.onDrainOrdered(() => {
    if (draining) return;
    end = "drain-ordered";
    log(`ordered to drain: no new claims; waiting for ${runs.size} running job(s)`);
    void beginDrain();
  });

  const inventory: InventoryLoop | undefined = !executor.reportsInventory
    ? undefined
    : startInventory({
        client,
        executor,
        liveJobs: () => new Set(runs.keys()),
        log,
        intervalMs: options.inventoryIntervalMs || undefined,
      });
  let resolveStopped: (end: AgentEnd) => void = () => {};
  const stopped = new Promise<AgentEnd>((resolve) => (resolveStopped = resolve));
  // A loop that ends by itself (job limit, idle, failure) drains the agent as drain() does.
  const loop = claimLoop().then(() => void beginDrain());
  const finished = async (): Promise<AgentEnd> => {
    await loop;
    await Promise.all([...runs.values()].map((r) => r.done));
    watch.stop();
    inventory?.stop();
    return { reason: end, claimed, settled, failure };
  };
  let finishing: Promise<void> | undefined;
  const beginDrain = () => {
    // Operators see "draining" while the running jobs finish (best effort: a refusal changes
    // nothing here, and the runner turns offline once it stops anyway).
    if (!draining && runs.size > 0)
      client.register(registration(clockOffsetNs, true)).catch((err: unknown) => {
        log(`could not tell the control plane this runner drains: ${(err as Error).message}`);
      });
    draining = true;
    claiming.abort();
    slotFreed();
    finishing ??= finished().then(resolveStopped);
    return stopped;
  };

  return {
    get clock() {
      return clock;
    },
    runningJobs: () => [...runs.keys()],
    stopped,
    drain() {
      if (!draining) log(`draining: no new claims; waiting for ${runs.size} running job(s)`);
      return beginDrain();
    },
    async stop() {
      log(`stopping: releasing ${runs.size} running job(s)`);
      const done = beginDrain();
      forced.abort();
      for (const run of runs.values()) run.release();
      await done;
    },
    reportInventory: async () => (inventory ? inventory.reportNow() : []),
  };
}
