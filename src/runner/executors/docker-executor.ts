import { idTokenDirEnv } from "../../protocol/id-token-files.js";
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { PassThrough } from "node:stream";
import type { JobSpec } from "../../../gen/forelead/runner/v1/job_pb.js";
import {
  createDockerClient,
  dockerMessage,
  dockerStatus,
  type DockerClient,
  type DockerContainer,
} from "./docker-api.js";
import {
  commonIncompatibility,
  type ExecutionRequest,
  type ExecutionResult,
  type Executor,
  type ExecutorResource,
  type RunningJob,
} from "./executor.js";
import { containerSampler } from "./docker-samples.js";
import {
  containerSecretsDir,
  secretsDirEnv,
  writeSecretFiles,
  type WrittenSecretFiles,
} from "./secret-files.js";
import { jobDirBinds, jobDirEnv } from "./job-dir.js";
import { containerName, labelKeys, mainTask, networkName, resourceLabels } from "./names.js";

/** Options of the docker executor. */
export interface DockerExecutorOptions {
  /** The runner whose resources these are: the forelead.runner label. */
  readonly runnerId: string;
  readonly workspaceId: string;
  /** The engine client; dockerode on DOCKER_HOST or the default socket when absent. */
  readonly docker?: DockerClient;
  /** Most processes a job container may run (a fork bomb stops here); 4096 by default. */
  readonly pidsLimit?: number;
}

type Failure = NonNullable<ExecutionResult["error"]>;

/**
 * Runs each job in a container on a network of its own, both named by the
 * launcher's pattern and carrying the four forelead.* labels: argv as the
 * command array (never a shell string), the spec's env, CPU and memory
 * limits, an empty /output bound from the job's directory, the checkout at
 * /workspace, the runner's input read-only at /input and the events file's
 * directory at /events (job-dir.ts). stdout and stderr are demultiplexed into log lines. The job's
 * secrets are env variables of the container; its secret files are written
 * to a private directory on the host's tmpfs (secret-files.ts: /dev/shm, so
 * never to a disk, nor into the container's writable layer) and bound
 * read-only at /run/secrets. The container, the network and the secret
 * files are removed when the job ends, whatever the end.
 */
export function createDockerExecutor(options: DockerExecutorOptions): Executor {
  let docker: DockerClient | undefined = options.docker;
  const engine = () => (docker ??= createDockerClient());
  const mine = `${labelKeys.runner}=${options.runnerId}`;

  return {
    kind: "docker",
    async prepare() {
      try {
        await engine().ping();
      } catch (err) {
        throw new Error(
          `the Docker engine does not answer (${dockerMessage(err)}); start ` +
            `dockerd, set DOCKER_HOST, or use --executor process`,
        );
      }
    },
    recover: async () => [],
    incompatibility(spec, capacity) {
      if (!spec.image)
        return "the spec has no image; the docker executor runs every job in a container";
      return commonIncompatibility(spec, capacity);
    },
    async start(request) {
      return runContainer(engine(), request, options.pidsLimit ?? 4096);
    },
    reportsInventory: true,
    async resources() {
      const d = engine();
      const items: ExecutorResource[] = [];
      for (const c of await d.listContainers({ all: true, filters: { label: [mine] } })) {
        const info = await d
          .getContainer(c.Id)
          .inspect()
          .catch(() => undefined);
        items.push({
          kind: "container",
          name: (c.Names[0] ?? c.Id).replace(/^\//, ""),
          jobId: c.Labels[labelKeys.job] ?? "",
          state: c.State,
          image: c.Image,
          createdAt: new Date(c.Created * 1000),
          cpu: info?.HostConfig.NanoCpus ? info.HostConfig.NanoCpus / 1e9 : undefined,
          memoryBytes: info?.HostConfig.Memory || undefined,
        });
      }
      for (const n of await d.listNetworks({ filters: { label: [mine] } })) {
        items.push({
          kind: "network",
          name: n.Name,
          jobId: n.Labels?.[labelKeys.job] ?? "",
          state: "created",
          createdAt: new Date(n.Created),
        });
      }
      return items;
    },
    async remove(kind, name) {
      const d = engine();
      if (kind === "container")
        await ignoreMissing(d.getContainer(name).remove({ force: true, v: true }));
      else await ignoreMissing(d.getNetwork(name).remove());
    },
  };
}

function runContainer(
  docker: DockerClient,
  request: ExecutionRequest,
  pidsLimit: number,
): RunningJob {
  const { jobId, spec } = request;
  const names = { container: containerName(jobId), network: networkName(jobId) };
  const labels = resourceLabels(request.runnerId, request.workspaceId, jobId, mainTask);
  const networkLabels = resourceLabels(request.runnerId, request.workspaceId, jobId);
  let container: DockerContainer | undefined;
  let secretFiles: WrittenSecretFiles | undefined;
  let stopRequested: number | undefined; // set by stop(); run() checks it before each step
  let started = false;
  let exited = false;
  // while it runs: what the sampler reads
  let live: { container: DockerContainer; startedAtMs: number } | undefined;

  const run = async (): Promise<ExecutionResult> => {
    const image = await ensureImage(docker, spec.image);
    if (image) return { durationMs: 0, error: image };
    if (stopRequested !== undefined) return { durationMs: 0 };
    await removeStale(docker, names, request);
    await docker.createNetwork({
      Name: names.network,
      Internal: true,
      Labels: networkLabels,
      CheckDuplicate: true,
    });
    const outputDir = join(request.jobDir, "output");
    await mkdir(outputDir, { recursive: true });
    secretFiles = await writeSecretFiles(request.secrets.files, request.jobDir);
    container = await docker.createContainer(
      containerOptions(spec, names, labels, outputDir, request, pidsLimit, secretFiles),
    );
    const stream = await container.attach({ stream: true, stdout: true, stderr: true });
    const stdout = new PassThrough();
    const stderr = new PassThrough();
    docker.modem.demuxStream(stream, stdout, stderr);
    stream.on("end", () => {
      stdout.end();
      stderr.end();
    });
    const lines = Promise.all([
      request.readOutput("stdout", stdout),
      request.readOutput("stderr", stderr),
    ]);
    if (stopRequested !== undefined) {
      stdout.end();
      stderr.end();
      return { durationMs: 0 };
    }
    started = true;
    const startedAt = performance.now();
    const startedAtSeconds = Math.floor(Date.now() / 1000) - 1;
    try {
      await container.start();
    } catch (err) {
      stdout.end();
      stderr.end();
      return {
        durationMs: 0,
        error: {
          code: "start_failed",
          message: `the container for job ${jobId} did not start: ${dockerMessage(err)}`,
          retryable: false,
        },
      };
    }
    const peak = watchPeakMemory(container);
    live = { container, startedAtMs: startedAt };
    const { StatusCode } = await container.wait();
    exited = true;
    live = undefined;
    const peakMemoryBytes = peak.stop();
    const durationMs = Math.round(performance.now() - startedAt);
    // A container the runner stopped itself was not killed for its memory.
    const oomKilled =
      stopRequested === undefined &&
      (await wasOomKilled(
        docker,
        container,
        startedAtSeconds,
        StatusCode,
        Number(spec.memoryBytes),
      ));
    await lines;
    if (oomKilled) {
      const limit = Number(spec.memoryBytes);
      return {
        durationMs,
        exitCode: StatusCode,
        ...peakMemoryBytes,
        error: {
          code: "out_of_memory",
          message: `the container was killed for going over its memory limit of ${limit} bytes`,
          retryable: false,
        },
      };
    }
    return { durationMs, exitCode: StatusCode, ...peakMemoryBytes };
  };

  const done = run()
    .catch((err): ExecutionResult => ({
      durationMs: 0,
      error: { code: "executor_error", message: `docker: ${dockerMessage(err)}`, retryable: true },
    }))
    .finally(async () => {
      exited = true;
      // Best effort: whatever stays behind is reported by the inventory as an orphan.
      if (container) await container.remove({ force: true, v: true }).catch(() => undefined);
      await docker
        .getNetwork(names.network)
        .remove()
        .catch(() => undefined);
      await secretFiles?.remove();
    });

  return {
    done,
    sampler: containerSampler(() => live),
    async stop(graceMs) {
      if (exited) return;
      stopRequested = graceMs;
      if (!started || !container) return; // run() sees stopRequested before it starts the container
      // docker stop: TERM, then KILL after t seconds; kill: KILL at once. 304/404/409: it has ended
      // already.
      const call =
        graceMs <= 0
          ? container.kill({ signal: "SIGKILL" })
          : container.stop({ t: Math.max(1, Math.ceil(graceMs / 1000)) });
      await call.catch(() => undefined);
    },
  };
}

/** Where a container sees its ID-token files (FORELEAD_ID_TOKEN_DIR), read-only. */
const containerIdTokenDir = "/run/forelead/id-tokens";

function containerOptions(
  spec: JobSpec,
  names: { container: string; network: string },
  labels: Record<string, string>,
  outputDir: string,
  request: ExecutionRequest,
  pidsLimit: number,
  secretFiles: WrittenSecretFiles | undefined,
) {
  const memory = Number(spec.memoryBytes);
  const env = {
    ...spec.env,
    ...request.secrets.env,
    ...(secretFiles ? { [secretsDirEnv]: containerSecretsDir } : {}),
    ...(request.idTokenDir ? { [idTokenDirEnv]: containerIdTokenDir } : {}),
    ...jobDirEnv(request.jobDir, "/"),
  };
  return {
    name: names.container,
    Image: spec.image,
    Cmd: [...spec.argv],
    Env: Object.entries(env).map(([k, v]) => `${k}=${v}`),
    Labels: labels,
    WorkingDir: "/",
    AttachStdout: true,
    AttachStderr: true,
    Tty: false,
    HostConfig: {
      NetworkMode: names.network,
      Binds: [
        `${outputDir}:/output`,
        ...(request.hasWorkspace ? [`${join(request.jobDir, "workspace")}:/workspace`] : []),
        ...(secretFiles ? [`${secretFiles.dir}:${containerSecretsDir}:ro`] : []),
        // The directory, not the files: a refreshed token (a new file renamed in) shows through.
        ...(request.idTokenDir ? [`${request.idTokenDir}:${containerIdTokenDir}:ro`] : []),
        ...jobDirBinds(request.jobDir),
      ],
      NanoCpus: spec.cpu > 0 ? Math.round(spec.cpu * 1e9) : undefined,
      Memory: memory > 0 ? memory : undefined,
      MemorySwap: memory > 0 ? memory : undefined,
      PidsLimit: pidsLimit,
      SecurityOpt: ["no-new-privileges"],
    },
  };
}

/** Exit status of a process killed by SIGKILL, as the kernel's OOM killer kills. */
const killedBySigkill = 137;

/**
 * Whether the engine killed the container for its memory limit. The container's OOMKilled flag is
 * not enough: the engine sets it only when the runtime's OOM event comes before its exit event,
 * and the two are sent separately (CI saw exit 137 with OOMKilled false, still false five seconds
 * later). The engine's "oom" event for the container is logged whichever comes first, so a SIGKILL
 * exit under a memory limit also looks for that event, up to five seconds after the exit.
 */
async function wasOomKilled(
  docker: DockerClient,
  container: DockerContainer,
  since: number,
  exitCode: number,
  memoryLimit: number,
): Promise<boolean> {
  const deadline = Date.now() + 5000;
  for (;;) {
    const state = await container.inspect().then(
      (i) => i.State,
      () => undefined,
    );
    if (state?.OOMKilled) return true;
    if (exitCode !== killedBySigkill || !(memoryLimit > 0)) return false;
    if (await oomEventLogged(docker, container.id, since)) return true;
    if (Date.now() >= deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

/** Whether the engine's event log has an "oom" event for the container since `since` (seconds). */
async function oomEventLogged(
  docker: DockerClient,
  containerId: string,
  since: number,
): Promise<boolean> {
  const until = Math.ceil(Date.now() / 1000);
  const filters = { type: ["container"], container: [containerId], event: ["oom"] };
  try {
    const stream = await docker.getEvents({ since, until, filters });
    let text = "";
    for await (const chunk of stream) text += String(chunk);
    return text.split("\n").some((line) => line.includes('"oom"'));
  } catch {
    return false;
  }
}

/**
 * Follows the engine's stats stream and keeps the highest memory figure:
 * the cgroup's own high-water mark where it has one (cgroup v1
 * max_usage), else the highest usage sampled. stop() ends the stream and
 * gives `{ peakMemoryBytes }`, or nothing when no sample arrived.
 */
function watchPeakMemory(container: DockerContainer): { stop(): { peakMemoryBytes?: number } } {
  let peak = 0;
  let stream: NodeJS.ReadableStream | undefined;
  let stopped = false;
  container.stats({ stream: true }).then(
    (s) => {
      stream = s;
      if (stopped) return destroy(s);
      let buffered = "";
      s.on("data", (chunk: Buffer) => {
        buffered += chunk.toString("utf8");
        let nl: number;
        while ((nl = buffered.indexOf("\n")) !== -1) {
          const line = buffered.slice(0, nl);
          buffered = buffered.slice(nl + 1);
          try {
            const m = (
              JSON.parse(line) as { memory_stats?: { usage?: number; max_usage?: number } }
            ).memory_stats;
            peak = Math.max(peak, m?.max_usage ?? 0, m?.usage ?? 0);
          } catch {
            // a partial or odd document: the next one will do
          }
        }
      });
      s.on("error", () => undefined);
    },
    () => undefined,
  );
  return {
    stop() {
      stopped = true;
      if (stream) destroy(stream);
      return peak > 0 ? { peakMemoryBytes: peak } : {};
    },
  };
}

function destroy(s: NodeJS.ReadableStream): void {
  (s as NodeJS.ReadableStream & { destroy?: () => void }).destroy?.();
}

/**
 * Makes sure `image` is present, pulling it when missing; the failure to report when it cannot be
 * had.
 */
async function ensureImage(docker: DockerClient, image: string): Promise<Failure | undefined> {
  try {
    await docker.getImage(image).inspect();
    return undefined;
  } catch (err) {
    if (dockerStatus(err) !== 404) throw err;
  }
  try {
    const progress = await docker.pull(image);
    await new Promise<void>((resolve, reject) =>
      docker.modem.followProgress(progress, (err, output) => {
        const failed = err ?? output.find((o) => o.error);
        if (failed) reject(new Error(failed instanceof Error ? failed.message : failed.error));
        else resolve();
      }),
    );
    return undefined;
  } catch (err) {
    return {
      code: "image_unavailable",
      message: `image ${JSON.stringify(image)} is not on this runner and cannot be pulled: ${dockerMessage(err)}`,
      retryable: false,
    };
  }
}

/**
 * The names belong to the job, not to an attempt: a container or network
 * left by an earlier attempt of this job (a runner that died) would block
 * this one. This runner holds the job's live lease, so such leftovers are
 * stale by definition and are removed; anything else of that name is left
 * alone and the create below fails with the engine's message.
 */
async function removeStale(
  docker: DockerClient,
  names: { container: string; network: string },
  request: ExecutionRequest,
): Promise<void> {
  const sameJob = (l: Record<string, string> | null | undefined) =>
    l?.[labelKeys.job] === request.jobId && l?.[labelKeys.workspace] === request.workspaceId;
  const old = await docker
    .getContainer(names.container)
    .inspect()
    .catch(() => undefined);
  if (old && sameJob(old.Config.Labels))
    await ignoreMissing(docker.getContainer(names.container).remove({ force: true, v: true }));
  const net = await docker
    .getNetwork(names.network)
    .inspect()
    .catch(() => undefined);
  if (net && sameJob(net.Labels)) await ignoreMissing(docker.getNetwork(names.network).remove());
}

async function ignoreMissing(p: Promise<unknown>): Promise<void> {
  try {
    await p;
  } catch (err) {
    if (dockerStatus(err) !== 404) throw err;
  }
}
