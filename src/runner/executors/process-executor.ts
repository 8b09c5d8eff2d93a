import { idTokenDirEnv, idTokenSocketEnv } from "../../protocol/id-token-files.js";
import { spawn, type ChildProcessByStdio } from "node:child_process";
import { randomInt } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { killUid, processStartTicks, processUid } from "./proc.js";
import { chmod, chown, lchown, mkdir, readdir, readFile, rm } from "node:fs/promises";
import { join } from "node:path";
import { constants } from "node:os";
import type { Readable } from "node:stream";
import {
  commonIncompatibility,
  type ExecutionResult,
  type Executor,
  type RunningJob,
} from "./executor.js";
import { processGroupSampler } from "./process-samples.js";
import { jobDirEnv, jobDirParts } from "./job-dir.js";
import { secretsDirEnv, writeSecretFiles, type WrittenSecretFiles } from "./secret-files.js";
import {
  networkUnavailable,
  probeIsolation,
  type IsolationReport,
  type JobNetwork,
} from "./isolation.js";
import {
  createJobSandbox,
  recoverSandbox,
  type JobSandbox,
  type SandboxParts,
} from "./job-sandbox.js";

/** The PATH a process job gets unless its spec sets one. */
const minimalPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/** Options of the process executor. */
export interface ProcessExecutorOptions {
  /**
   * Run each job as a user of its own (a uid from `uidBase` upward, picked at
   * random per job) so jobs cannot read each other's directories. Only
   * possible when the runner runs as root; true by default then.
   */
  readonly isolateUsers?: boolean;
  readonly uidBase?: number;
  /**
   * The job's network (isolation.ts): private (the default) or none need the runner to be root
   * and the host to offer them, else prepare() refuses to start; host is never the default.
   */
  readonly network?: JobNetwork;
  /** Where the executor says, once at start, what it isolates jobs with. */
  readonly log?: (message: string) => void;
}

/** How many uids jobs are given, from uidBase up. */
const uidSpan = 1_000_000;

/**
 * Runs jobs as local processes, for machines without Docker: argv without a
 * shell, in the job's own directory, with only the spec's env, the job's
 * secrets and a minimal PATH, in a process group of its own (detached) so
 * cancel and timeout kill everything it started. Secret files are written
 * to a private directory (secret-files.ts) named by FORELEAD_SECRETS_DIR and
 * removed when the job has ended. The runner's input/ (job-dir.ts) stays the
 * runner's, read-only to a job run as a user of its own, and the job's
 * directory is sticky so the job cannot replace it (docs/job-contract.md).
 * As root, where the host allows (isolation.ts), each job also runs in a
 * sandbox of its own (job-sandbox.ts): a PID namespace with its own /proc, a
 * cgroup, and the network of `network`.
 * The image is not used; CPU and memory are checked against the machine but
 * not enforced.
 */
export function createProcessExecutor(options: ProcessExecutorOptions = {}): Executor {
  const isRoot = process.getuid?.() === 0;
  const isolate = (options.isolateUsers ?? isRoot) && isRoot;
  const uidBase = options.uidBase ?? 200_000;
  const uidsInUse = new Set<number>();
  const network = options.network ?? "private";
  let isolation: IsolationReport | undefined;

  return {
    kind: "process",
    async prepare() {
      if (!isolate) {
        if (network !== "host")
          throw new Error(
            `--job-network ${network} cannot be had: the runner is not root (network ` +
              `namespaces need it); pass --job-network host to run jobs on this host's network, ` +
              `loopback included (docs/operations.md, "What a job is isolated from")`,
          );
        options.log?.("jobs run as this user, on the host's network, seeing every process");
        return;
      }
      isolation = await probeIsolation();
      const why = networkUnavailable(isolation, network);
      if (why || (network !== "host" && !isolation.pidNamespace.available))
        throw new Error(
          `--job-network ${network} cannot be had here: ${why ?? isolation.pidNamespace.detail}; ` +
            `fix that, or pass --job-network host to run jobs on this host's network, loopback ` +
            `included (\`forelead runner --check\` and docs/operations.md, "What a job is ` +
            `isolated from")`,
        );
      options.log?.(
        `jobs run as uids of their own` +
          (isolation.pidNamespace.available
            ? ", each in a PID namespace with its own /proc"
            : ` without a PID namespace (${isolation.pidNamespace.detail})`) +
          (isolation.cgroup.available
            ? " and a cgroup"
            : `, without a cgroup (${isolation.cgroup.detail})`) +
          `; network ${network}`,
      );
    },
    // A pid record is acted on only for a process running as a uid this runner hands out (or its
    // own, when jobs run as the runner's user), or for a sandbox's unshare dropping to such a uid:
    // a planted record cannot aim the kill elsewhere.
    recover: (jobsDir) =>
      recoverLeftovers(
        jobsDir,
        (uid) => (isolate ? uid >= uidBase && uid < uidBase + uidSpan : uid === process.getuid?.()),
        isolation,
      ),
    incompatibility: (spec, capacity) => commonIncompatibility(spec, capacity),
    reportsInventory: false,
    resources: async () => [],
    async remove(kind, name) {
      throw new Error(`the process executor creates no ${kind}s; cannot remove ${name}`);
    },

    async start(request): Promise<RunningJob> {
      const { spec, jobDir } = request;
      await mkdir(join(jobDir, "output"), { recursive: true });
      let uid: number | undefined;
      if (isolate) {
        do uid = uidBase + randomInt(uidSpan);
        while (uidsInUse.has(uid));
        uidsInUse.add(uid);
        await chownTree(jobDir, uid, jobDirParts.input);
        // The job's directory stays the runner's, writable by the job's group (its uid's own) and
        // sticky: the job makes and removes its own files there but cannot rename or replace
        // input/, which stays the runner's, read-only to the job (docs/job-contract.md).
        await chown(jobDir, process.getuid!(), uid);
        await chmod(jobDir, 0o1770);
      } else {
        await chmod(jobDir, 0o700);
      }
      let secretFiles: WrittenSecretFiles | undefined;
      let sandbox: JobSandbox | undefined;
      let child: ChildProcessByStdio<null, Readable, Readable>;
      try {
        // its errors name files, never contents
        secretFiles = await writeSecretFiles(request.secrets.files, jobDir, uid);
        // The agent keeps the tokens fresh: later files take the directory's owner (id-tokens.ts).
        if (uid !== undefined && request.idTokenDir)
          for (const path of [
            request.idTokenDir,
            ...(await readdir(request.idTokenDir)).map((f) => join(request.idTokenDir!, f)),
          ])
            await chown(path, uid, uid);
        if (uid !== undefined && isolation?.pidNamespace.available)
          sandbox = await createJobSandbox(isolation, uid, network);
      } catch (err) {
        if (uid !== undefined) uidsInUse.delete(uid);
        await secretFiles?.remove();
        throw err;
      }
      // In a sandbox, unshare (as root) drops to the job's uid itself, and the job's init reports
      // how the job ended on fd 3.
      const command = sandbox?.command(spec.argv) ?? {
        file: spec.argv[0]!,
        args: spec.argv.slice(1),
      };
      try {
        child = spawn(command.file, command.args, {
          cwd: jobDir,
          env: {
            PATH: minimalPath,
            ...spec.env,
            ...request.secrets.env,
            ...(secretFiles ? { [secretsDirEnv]: secretFiles.dir } : {}),
            ...(request.idTokenDir ? { [idTokenDirEnv]: request.idTokenDir } : {}),
            ...(request.idTokenSocket ? { [idTokenSocketEnv]: request.idTokenSocket } : {}),
            ...jobDirEnv(jobDir, ""),
          },
          detached: true, // its own process group: kill(-pid) reaches everything it started
          stdio: ["ignore", "pipe", "pipe", ...(sandbox ? (["pipe"] as const) : [])],
          uid: sandbox ? undefined : uid,
          gid: sandbox ? undefined : uid,
        }) as ChildProcessByStdio<null, Readable, Readable>;
      } catch (err) {
        if (uid !== undefined) uidsInUse.delete(uid);
        await secretFiles?.remove();
        await sandbox?.remove();
        // Node's own message of a refused spawn quotes the env it was given: never pass it on.
        throw new Error(
          `the process could not be started (${(err as NodeJS.ErrnoException).code ?? (err as Error).name})`,
        );
      }
      const ended = sandbox ? readAll(child.stdio[3] as Readable) : Promise.resolve("");
      const started = performance.now();
      // Recorded beside the job's directory (where the job cannot write), for recoverLeftovers
      // after a crash. Synchronously, before anything is awaited: the exit listener below must be
      // attached at once, and the record must exist before the job gets far.
      const pidFile = `${jobDir}.pid`;
      recordPid(pidFile, child.pid, request.jobId, sandbox && { uid: uid!, ...sandbox.made });
      const killGroup = (signal: NodeJS.Signals) => {
        if (child.pid === undefined) return;
        try {
          process.kill(-child.pid, signal);
        } catch {
          // ESRCH: the group is gone already.
        }
      };
      const outputs = Promise.all([
        request.readOutput("stdout", child.stdout),
        request.readOutput("stderr", child.stderr),
      ]);
      let exited = false;
      const done = new Promise<ExecutionResult>((resolve) => {
        child.once("error", (err: NodeJS.ErrnoException) => {
          // errors after spawn (e.g. kill failures) are not the job's end
          if (child.pid !== undefined) return;
          exited = true;
          const why =
            err.code === "ENOENT"
              ? `not found (PATH is ${spec.env.PATH ?? minimalPath})`
              : err.message;
          resolve({
            durationMs: 0,
            error: {
              code: "start_failed",
              message: `cannot run ${JSON.stringify(spec.argv[0])}: ${why}`,
              retryable: false,
            },
          });
        });
        child.once("exit", (code, signal) => {
          exited = true;
          // Whatever the job left running ends with it, so its pipes close and nothing outlives the
          // job: its cgroup, its PID namespace (gone with its init), its process group, and as a
          // user of its own every process of its uid, which a setsid or a double fork cannot leave.
          void sandbox?.kill();
          killGroup("SIGKILL");
          if (uid !== undefined) killUid(uid);
          const durationMs = Math.round(performance.now() - started);
          void Promise.all([outputs, ended]).then(([, status]) => {
            const [what, detail, ...message] = status.split(" ");
            if (what === "E")
              return resolve({
                durationMs: 0,
                error: {
                  code: "start_failed",
                  message:
                    `cannot run ${JSON.stringify(spec.argv[0])}: ` +
                    (detail === "ENOENT"
                      ? `not found (PATH is ${spec.env.PATH ?? minimalPath})`
                      : message.join(" ")),
                  retryable: false,
                },
              });
            const killedBy = what === "S" ? signalName(Number(detail)) : undefined;
            resolve({
              durationMs,
              exitCode: killedBy ? undefined : (code ?? undefined),
              signal: killedBy ?? signal ?? undefined,
            });
          });
        });
      }).finally(async () => {
        if (uid !== undefined) uidsInUse.delete(uid);
        await sandbox?.remove();
        await rm(pidFile, { force: true });
        await secretFiles?.remove();
      });

      return {
        done,
        sampler: processGroupSampler(child.pid),
        async stop(graceMs) {
          if (exited) return;
          if (graceMs <= 0) return killGroup("SIGKILL");
          killGroup("SIGTERM");
          const timer = setTimeout(() => killGroup("SIGKILL"), graceMs);
          // Not done.finally(): its own promise would reject, unhandled, when the job's cleanup
          // fails (job-run awaits done).
          const clear = () => clearTimeout(timer);
          done.then(clear, clear);
        },
      };
    },
  };
}

/**
 * Kills the process groups recorded in `<jobsDir>/*.pid` by an earlier life
 * of this runner (SIGKILLed or crashed: its detached jobs ran on). A group is
 * killed only when its leader is still the very process recorded (same
 * start time in /proc), never a stranger that reused the pid.
 */
async function recoverLeftovers(
  jobsDir: string,
  ownUid: (uid: number) => boolean,
  isolation: IsolationReport | undefined,
): Promise<string[]> {
  const names = await readdir(jobsDir).catch(() => [] as string[]);
  const stopped: string[] = [];
  const sandboxes: SandboxParts[] = [];
  for (const name of names.filter((n) => n.endsWith(".pid"))) {
    const record = JSON.parse(await readFile(join(jobsDir, name), "utf8").catch(() => "{}")) as {
      pid?: number;
      startTicks?: string;
      jobId?: string;
      sandbox?: SandboxRecord;
    };
    // Its cgroup and network namespace, whether or not its processes still run.
    if (record.sandbox) sandboxes.push(record.sandbox);
    if (!record.pid || !record.startTicks || processStartTicks(record.pid) !== record.startTicks)
      continue;
    const uid = processUid(record.pid);
    if (uid === undefined) continue;
    // A sandboxed job's recorded process is its unshare, run as root and dropping to the job's uid.
    const sandboxUid = record.sandbox?.uid;
    const sandboxed =
      uid === 0 &&
      sandboxUid !== undefined &&
      ownUid(sandboxUid) &&
      isSandboxOf(record.pid, sandboxUid);
    if (!sandboxed && !ownUid(uid)) continue;
    try {
      process.kill(-record.pid, "SIGKILL");
      stopped.push(`process group ${record.pid} of job ${record.jobId ?? "?"}`);
    } catch {
      // gone meanwhile
    }
  }
  // After the kills: a network namespace is removed only once nothing runs in it.
  if (isolation) for (const parts of sandboxes) await recoverSandbox(isolation, parts);
  return stopped;
}

/** Whether `pid` is an unshare that runs a job as `uid` (job-sandbox.ts). */
function isSandboxOf(pid: number, uid: number): boolean {
  try {
    const argv = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
    return /\/unshare$/.test(argv[0] ?? "") && argv.includes(`--setuid=${uid}`);
  } catch {
    return false;
  }
}

/** A sandboxed job's uid and what its sandbox made, in its pid record. */
interface SandboxRecord extends SandboxParts {
  readonly uid: number;
}

/**
 * Writes `{pid, startTicks, jobId, sandbox}` to `file`; nothing off Linux (no start time: a reused
 * pid could not be told apart).
 */
function recordPid(
  file: string,
  pid: number | undefined,
  jobId: string,
  sandbox: SandboxRecord | undefined,
): void {
  if (pid === undefined) return;
  try {
    const startTicks = processStartTicks(pid);
    if (startTicks) writeFileSync(file, JSON.stringify({ pid, startTicks, jobId, sandbox }));
  } catch {
    // The job already ended (no /proc entry): nothing to recover later.
  }
}

/** Everything `from` yields until it ends, as text. */
function readAll(from: Readable): Promise<string> {
  let text = "";
  from.setEncoding("utf8");
  from.on("data", (chunk: string) => (text += chunk));
  return new Promise((resolve) => from.once("close", () => resolve(text)));
}

/** The name of signal number `n` (SIGTERM for 15), or undefined for an unknown number. */
function signalName(n: number): NodeJS.Signals | undefined {
  return (Object.keys(constants.signals) as NodeJS.Signals[]).find(
    (name) => constants.signals[name] === n,
  );
}

/**
 * Gives `dir` and everything in it to `uid` (the agent made them as root), except its entry named
 * `keep`.
 */
async function chownTree(dir: string, uid: number, keep?: string): Promise<void> {
  await chown(dir, uid, uid);
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    if (entry.name === keep) continue;
    const path = join(dir, entry.name);
    if (entry.isDirectory()) await chownTree(path, uid);
    else await lchown(path, uid, uid); // a symlink itself, never what it points to
  }
}
