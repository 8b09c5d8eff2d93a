import type { Readable } from "node:stream";
import type { JobSpec } from "../../../gen/forelead/runner/v1/job_pb.js";

/** What the runner can offer a job: the same figures it registers with. */
export interface RunnerCapacity {
  /** Whole CPUs. */
  readonly cpu: number;
  readonly memoryBytes: number;
}

/** One job to run: the executor turns it into a container or a process. */
export interface ExecutionRequest {
  readonly runnerId: string;
  readonly workspaceId: string;
  readonly jobId: string;
  readonly spec: JobSpec;
  /**
   * A fresh directory for this job only, made and removed by the agent. The
   * executor adds `output/` (empty; /output in a container); a checkout step
   * may have put the tree in `workspace/` (/workspace). The job starts in
   * this directory (/ in a container), so `output/` and `workspace/` are the
   * same relative paths under both executors.
   */
  readonly jobDir: string;
  /** Whether `jobDir/workspace` holds a checked-out tree to mount. */
  readonly hasWorkspace: boolean;
  /**
   * Reads one of the job's output streams to its end and passes on every
   * line, decoded and with the job's secret values masked (the agent's one
   * masking step: executors hand over raw streams, never lines). Resolves
   * when every line was passed on.
   */
  readonly readOutput: (stream: "stdout" | "stderr", from: Readable) => Promise<void>;
  /** What the job is given besides its spec: never logged, never in an event. */
  readonly secrets: JobSecrets;
  /**
   * The directory of the job's ID-token files, kept fresh by the agent (FORELEAD_ID_TOKEN_DIR);
   * undefined when the job may have none. The executor gives it to the job's uid and names it.
   */
  readonly idTokenDir?: string;
  /** The on-demand token socket in that directory (FORELEAD_ID_TOKEN_SOCKET; process jobs). */
  readonly idTokenSocket?: string;
}

/** A job's secrets as its lease delivered them. */
export interface JobSecrets {
  /**
   * Environment-variable name to value, added to the spec's env (a secret wins over a spec.env
   * variable of its name).
   */
  readonly env: Readonly<Record<string, string>>;
  /**
   * File name (one path segment) to content; written to a private directory named by
   * FORELEAD_SECRETS_DIR (secret-files.ts).
   */
  readonly files: Readonly<Record<string, string>>;
}

/** How a job ended, as far as the executor saw. */
export interface ExecutionResult {
  /** The exit code; undefined when the job was killed by a signal or never started. */
  readonly exitCode?: number;
  /** The signal that ended it, when one did (process executor). */
  readonly signal?: string;
  readonly durationMs: number;
  /** Highest memory use, where the executor knows it. */
  readonly peakMemoryBytes?: number;
  /**
   * Set when the executor could not run the job at all (e.g. an image that cannot be had), or the
   * engine killed it (out of memory).
   */
  readonly error?: { readonly code: string; readonly message: string; readonly retryable: boolean };
}

/** One reading of a running job's resource use: what a resource.sample event carries. */
export interface ResourceUsage {
  /**
   * CPU used since the previous reading (or the start), in cores: 1.5 is one and a half CPUs busy.
   */
  readonly cpuCores: number;
  /**
   * Memory in use now (resident set; for a container, usage less inactive page cache as `docker
   * stats` shows it).
   */
  readonly memoryBytes: number;
}

/**
 * Reads a running job's resource use; each reading averages CPU over the time since the one before.
 */
export interface ResourceSampler {
  /** The job's use now, or undefined when it cannot be read (not started yet, or gone). */
  sample(): Promise<ResourceUsage | undefined>;
}

/** A job the executor has started. */
export interface RunningJob {
  /** Resolves when the job has ended and its resources are gone. */
  readonly done: Promise<ExecutionResult>;
  /**
   * Reads the job's CPU and memory while it runs (the agent sends resource.sample events from it).
   */
  readonly sampler?: ResourceSampler;
  /**
   * Asks the job to stop: TERM, then KILL after `graceMs` (0: KILL at once).
   * Resolves when the request is made; `done` says when it ended.
   */
  stop(graceMs: number): Promise<void>;
}

/** A resource the executor created (Docker container or network), as the inventory reports it. */
export interface ExecutorResource {
  readonly kind: "container" | "network";
  readonly name: string;
  readonly jobId: string;
  readonly state: string;
  readonly image?: string;
  readonly createdAt?: Date;
  readonly cpu?: number;
  readonly memoryBytes?: number;
}

/** Runs jobs: in Docker containers, or as local processes. */
export interface Executor {
  /** Its name in executors/kinds.ts (docker, process), as job events and logs report it. */
  readonly kind: string;
  /** Checks the engine can be used (e.g. Docker answers); throws with advice when not. */
  prepare(): Promise<void>;
  /**
   * After a crash: stops what jobs of an earlier life of this runner left
   * running under `jobsDir` (before the agent clears it); returns what it
   * stopped. Docker leftovers are not touched here: the inventory reports
   * them as orphans and they are reaped on order.
   */
  recover(jobsDir: string): Promise<string[]>;
  /** Why this executor cannot run `spec` on this machine, or undefined when it can. */
  incompatibility(spec: JobSpec, capacity: RunnerCapacity): string | undefined;
  start(request: ExecutionRequest): Promise<RunningJob>;
  /**
   * Whether the executor creates containers and networks to report as
   * inventory. The process executor does not: a runner that reported an
   * empty inventory would have every live lease flagged "lease without
   * container" by the control plane, so it sends no reports at all.
   */
  readonly reportsInventory: boolean;
  /** What the executor has created for this runner and not yet removed. */
  resources(): Promise<ExecutorResource[]>;
  /** Removes one resource this runner created (a reap order). */
  remove(kind: "container" | "network", name: string): Promise<void>;
}

/** Checks every executor makes: a command to run, and limits within the machine. */
export function commonIncompatibility(spec: JobSpec, capacity: RunnerCapacity): string | undefined {
  if (spec.argv.length === 0 || spec.argv[0] === "")
    return 'the spec has no argv; give the command as an array, e.g. ["sh", "-c", "make test"]';
  if (spec.cpu < 0 || !Number.isFinite(spec.cpu)) return `the spec asks for ${spec.cpu} CPUs`;
  if (spec.cpu > capacity.cpu)
    return `the spec asks for ${spec.cpu} CPUs; this runner has ${capacity.cpu}`;
  const memory = Number(spec.memoryBytes);
  if (memory < 0) return `the spec asks for ${memory} bytes of memory`;
  if (memory > capacity.memoryBytes)
    return `the spec asks for ${memory} bytes of memory; this runner has ${capacity.memoryBytes}`;
  if (spec.timeoutSeconds < 0) return `the spec's timeoutSeconds is ${spec.timeoutSeconds}`;
  return undefined;
}
