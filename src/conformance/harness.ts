// The conformance kit's stage: a throwaway control plane in this process
// (embedded database in memory, a fresh CA), a fresh runner identity on disk,
// the runner under test started from its command, and the admin client the
// rows drive it with. Everything lives in one temporary directory, removed
// at close.
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Client } from "@connectrpc/connect";
import { toJson, type JsonValue } from "@bufbuild/protobuf";
import { ValueSchema, type Value } from "@bufbuild/protobuf/wkt";
import { AdminService } from "../../gen/forelead/admin/v1/admin_pb.js";
import { FleetService } from "../../gen/forelead/admin/v1/fleet_pb.js";
import { InputService } from "../../gen/forelead/admin/v1/input_pb.js";
import type { Job } from "../../gen/forelead/runner/v1/job_pb.js";
import { expireLeaseNow } from "../broker/leases/expire.js";
import {
  createCertificateAuthority,
  issueClientCertificate,
  issueServerCertificate,
} from "../identity/ca.js";
import { writeFileAtomic, writeIssued } from "../identity/pki-files.js";
import { runnerSpiffeId } from "../identity/principal.js";
import { defaultMaxLifetimeMs } from "../identity/certificate-policy.js";
import { startControlPlane, type ControlPlane } from "../server/control-plane.js";
import { serviceClientFromFlags } from "../cli/connection.js";

/** How the kit is run. */
export interface KitOptions {
  /** The runner's command line, run by `sh -c` with the placeholders (placeholders) replaced. */
  readonly runnerCommand: string;
  /** How the runner runs jobs: decides the image field and where a job's output directory is. */
  readonly executor: "docker" | "process";
  /** The image docker jobs name (ignored by the process executor). */
  readonly image: string;
  /** The most one row waits for what it checks, in seconds. */
  readonly rowTimeoutSeconds: number;
  /** The lease length the throwaway control plane gives. */
  readonly leaseSeconds: number;
  /** Progress lines (the kit's own, not a row's result). */
  readonly log?: (message: string) => void;
}

/** What the runner command's placeholders and environment variables stand for. */
export interface RunnerLaunch {
  readonly server: string;
  readonly ca: string;
  readonly cert: string;
  readonly key: string;
  readonly runnerId: string;
  readonly workspaceId: string;
  /** A fresh empty directory the runner may use for its state and job directories. */
  readonly workDir: string;
}

/** Placeholder → environment variable, for the runner's command (docs/conformance.md). */
export const placeholders: Readonly<Record<keyof RunnerLaunch, string>> = {
  server: "FORELEAD_SERVER",
  ca: "FORELEAD_CA",
  cert: "FORELEAD_CERT",
  key: "FORELEAD_KEY",
  runnerId: "FORELEAD_RUNNER_ID",
  workspaceId: "FORELEAD_WORKSPACE_ID",
  workDir: "FORELEAD_WORK_DIR",
};

/** A row's check that did not hold: its message is the table's reason. */
export class RowFailure extends Error {}

/** What a job the kit enqueues runs: a shell script, with optional spec fields and secrets. */
interface KitJob {
  readonly script: string;
  readonly labels?: string[];
  readonly timeoutSeconds?: number;
  readonly cpu?: number;
  readonly secrets?: Record<string, string>;
}

/** The stage the rows run on. */
export interface Harness {
  readonly options: KitOptions;
  readonly plane: ControlPlane;
  readonly admin: Client<typeof AdminService>;
  /** Answers a suspended job's input request (POST /v1/admin/jobs/{jobId}/input). */
  readonly input: Client<typeof InputService>;
  readonly launch: RunnerLaunch;
  /** Where a job's output directory is, as the job's shell sees it. */
  readonly outputDir: string;
  /**
   * Where a job's input directory is (answer and checkpoint of a resumed job), as the job's shell
   * sees it.
   */
  readonly inputDir: string;
  /** Every job the kit enqueued, in order. */
  readonly jobIds: readonly string[];
  enqueue(job: KitJob): Promise<string>;
  job(jobId: string): Promise<Job>;
  /**
   * Polls the job until `holds`, or fails the row naming `what` and the job's state after the row's
   * timeout.
   */
  waitFor(
    jobId: string,
    what: string,
    holds: (job: Job) => boolean,
    withinMs?: number,
  ): Promise<Job>;
  /** The job's log lines' text, every attempt, in order. */
  logText(jobId: string): Promise<string[]>;
  /** The job's events (as JSON), every attempt, in order. */
  jobEvents(jobId: string): Promise<JsonValue[]>;
  /** The global event stream of the kit's workspace (as JSON). */
  workspaceEvents(): Promise<Array<{ type: string; jobId: string; data: JsonValue }>>;
  /** Every audit record since the kit started, as JSON text. */
  auditText(): Promise<string>;
  /** What the runner process wrote to its stdout and stderr so far. */
  runnerOutput(): Promise<string>;
  /** Whether the runner process has exited, and how. */
  runnerExit(): string | undefined;
  /**
   * Requests the control plane answered on `route` (e.g. "POST /v1/runner/complete"), by HTTP
   * status.
   */
  answered(route: string): Promise<Map<string, number>>;
  /**
   * Makes the job's live lease expire now and sweeps it (the job, at its last attempt, fails
   * lease_lost).
   */
  expireLease(jobId: string): Promise<void>;
  close(): Promise<void>;
}

const trustDomain = "forelead";
const adminId = `spiffe://${trustDomain}/services/conformance-kit`;

/** Starts the control plane, writes the runner's identity and starts the runner command. */
export async function startHarness(options: KitOptions): Promise<Harness> {
  const dir = await mkdtemp(join(tmpdir(), "forelead-conformance-"));
  const say = options.log ?? (() => {});
  const cleanups: Array<() => Promise<void>> = [() => rm(dir, { recursive: true, force: true })];
  const close = async () => {
    for (const c of cleanups.splice(0).reverse())
      await c().catch((err: unknown) => say(`while closing: ${(err as Error).message}`));
  };
  try {
    const ca = await createCertificateAuthority({ commonName: "forelead conformance CA" });
    const server = await issueServerCertificate(ca, { hosts: ["127.0.0.1", "::1", "localhost"] });
    const runnerId = `conformance-${randomBytes(3).toString("hex")}`;
    const workspaceId = "conformance";
    const caFile = join(dir, "ca.pem");
    await writeFileAtomic(caFile, ca.certPem, 0o644);
    const runnerFiles = await writeIssued(
      join(dir, "runner"),
      await issueClientCertificate(ca, {
        uris: [runnerSpiffeId(trustDomain, runnerId, workspaceId)],
      }),
    );
    const adminFiles = await writeIssued(
      join(dir, "admin"),
      await issueClientCertificate(ca, { uris: [adminId] }),
    );
    const plane = await startControlPlane({
      host: "127.0.0.1",
      port: 0,
      tlsCertPem: server.certPem,
      tlsKeyPem: server.keyPem,
      clientCaPem: ca.certPem,
      trustDomain,
      database: "memory://",
      admins: [adminId],
      leaseSeconds: options.leaseSeconds,
      maxCertLifetimeMs: defaultMaxLifetimeMs,
      // The control plane's own timeout comes long after the runner's: the timeout row sees the
      // runner's.
      jobTimeouts: { defaultSeconds: 600, maxSeconds: 3600, graceSeconds: 600 },
      metricsListen: { host: "127.0.0.1", port: 0 },
    });
    cleanups.push(() => plane.close());
    const flags = { server: plane.url, ca: caFile, cert: adminFiles.cert, key: adminFiles.key };
    const admin = await serviceClientFromFlags(flags, AdminService);
    const fleet = await serviceClientFromFlags(flags, FleetService);
    const input = await serviceClientFromFlags(flags, InputService);
    const workDir = join(dir, "work");
    await mkdir(workDir, { mode: 0o700 });
    const launch: RunnerLaunch = {
      server: plane.url,
      ca: caFile,
      cert: runnerFiles.cert,
      key: runnerFiles.key,
      runnerId,
      workspaceId,
      workDir,
    };
    const runner = startRunner(options.runnerCommand, launch);
    cleanups.push(() => stopRunner(runner.child));
    say(
      `control plane ${plane.url} (lease ${options.leaseSeconds}s); runner ` +
        `${runnerId} in workspace ${workspaceId}: ` +
        `${substitute(options.runnerCommand, launch)}`,
    );

    const jobIds: string[] = [];
    const started = new Date();
    const job = async (jobId: string) => (await admin.getJob({ jobId })).job!;
    const harness: Harness = {
      options,
      plane,
      admin,
      input,
      launch,
      outputDir: options.executor === "docker" ? "/output" : "output",
      inputDir: options.executor === "docker" ? "/input" : "input",
      jobIds,
      async enqueue(j) {
        const { job: enqueued } = await admin.enqueueJob({
          apiVersion: "v1",
          workspaceId,
          labels: j.labels ?? [],
          maxAttempts: 1,
          spec: {
            image: options.image,
            argv: ["sh", "-c", j.script],
            timeoutSeconds: j.timeoutSeconds,
            cpu: j.cpu,
          },
          secrets: j.secrets,
        });
        jobIds.push(enqueued!.id);
        return enqueued!.id;
      },
      job,
      async waitFor(jobId, what, holds, withinMs = options.rowTimeoutSeconds * 1000) {
        const deadline = Date.now() + withinMs;
        for (;;) {
          const current = await job(jobId);
          if (holds(current)) return current;
          if (Date.now() > deadline)
            throw new RowFailure(
              `${what}: after ${Math.round(withinMs / 1000)}s job ${jobId} is ${describeJob(current)}`,
            );
          const exit = runner.exit();
          if (exit)
            throw new RowFailure(
              `${what}: the runner exited (${exit}); job ${jobId} is ${describeJob(current)}`,
            );
          await new Promise((r) => setTimeout(r, 200));
        }
      },
      async logText(jobId) {
        const lines: string[] = [];
        for await (const m of admin.getJobLogs({ jobId })) {
          const data = json(m.data) as { text?: unknown } | null;
          lines.push(typeof data?.text === "string" ? data.text : JSON.stringify(data));
        }
        return lines;
      },
      async jobEvents(jobId) {
        const events: JsonValue[] = [];
        for await (const m of admin.getJobEvents({ jobId })) events.push(json(m.data));
        return events;
      },
      async workspaceEvents() {
        const events: Array<{ type: string; jobId: string; data: JsonValue }> = [];
        let afterId = 0n;
        for (;;) {
          const page: typeof events = [];
          for await (const e of fleet.streamEvents({ workspaceId, afterId, pageSize: 500 })) {
            page.push({ type: e.type, jobId: e.jobId, data: e.data ?? {} });
            afterId = e.id;
          }
          events.push(...page);
          if (page.length < 500) return events;
        }
      },
      async auditText() {
        await plane.audit.flush();
        const records: unknown[] = [];
        let pageToken = "";
        do {
          const page = await admin.listAuditRecords({
            since: { seconds: BigInt(Math.floor(started.getTime() / 1000)), nanos: 0 },
            pageSize: 1000,
            pageToken,
          });
          records.push(...page.records);
          pageToken = page.nextPageToken;
        } while (pageToken);
        return JSON.stringify(records, (_, v: unknown) =>
          typeof v === "bigint" ? v.toString() : v,
        );
      },
      runnerOutput: async () => runner.output(),
      runnerExit: runner.exit,
      async answered(route) {
        const text = await (await fetch(`${plane.metrics!.url}/metrics`)).text();
        return requestCounts(text, route);
      },
      async expireLease(jobId) {
        if (!(await expireLeaseNow(plane.store.db, jobId)))
          throw new RowFailure(
            `job ${jobId} holds no live lease to expire; it is ${describeJob(await job(jobId))}`,
          );
        await plane.broker.sweep();
      },
      close,
    };
    return harness;
  } catch (err) {
    await close();
    throw err;
  }
}

/** A stream message's data as JSON. */
function json(data: Value | undefined): JsonValue {
  return data === undefined ? null : toJson(ValueSchema, data);
}

/** A job's state in a row's reason: "failed (exit 3, error exit_code: sh exited 3)". */
export function describeJob(job: Job): string {
  const facts = [
    job.exitCode !== undefined ? `exit ${job.exitCode}` : "",
    job.error?.code ? `error ${job.error.code}: ${job.error.message}` : "",
    job.failure?.reason ? `settled by the control plane: ${job.failure.reason}` : "",
  ].filter(Boolean);
  return `${job.state}${facts.length ? ` (${facts.join("; ")})` : ""}`;
}

/** The command with each {placeholder} replaced by its value, shell-quoted. */
export function substitute(command: string, launch: RunnerLaunch): string {
  return command.replace(/\{(\w+)\}/g, (whole, name: string) =>
    name in placeholders ? shellQuote(launch[name as keyof RunnerLaunch]) : whole,
  );
}

function shellQuote(value: string): string {
  return /^[\w@%+=:,./-]+$/.test(value) ? value : `'${value.replace(/'/g, `'\\''`)}'`;
}

/**
 * Starts `sh -c command` in a process group of its own (so close stops whatever it started), output
 * to `outputFile`.
 */
function startRunner(
  command: string,
  launch: RunnerLaunch,
): { child: ChildProcess; exit: () => string | undefined; output: () => string } {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const [name, variable] of Object.entries(placeholders))
    env[variable] = launch[name as keyof RunnerLaunch];
  const child = spawn("sh", ["-c", substitute(command, launch)], {
    detached: true,
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  // Kept whole (a run's runner output is small): the secrets row searches all of it.
  const output: Buffer[] = [];
  child.stdout!.on("data", (d: Buffer) => output.push(d));
  child.stderr!.on("data", (d: Buffer) => output.push(d));
  let exit: string | undefined;
  // "close": after its output ended too, so a runner that exited has all of it read.
  child.once("close", (code, signal) => {
    exit = signal ? `signal ${signal}` : `exit code ${code}`;
  });
  child.once("error", (err) => {
    exit = `could not start: ${err.message}`;
  });
  return { child, exit: () => exit, output: () => Buffer.concat(output).toString("utf8") };
}

/** SIGTERM to the runner's process group, then SIGKILL if it is still there after 15 s. */
async function stopRunner(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null || child.pid === undefined) return;
  const exited = new Promise<void>((resolve) => child.once("close", () => resolve()));
  const signal = (s: NodeJS.Signals) => {
    try {
      process.kill(-child.pid!, s);
    } catch {
      // ESRCH: the group is gone.
    }
  };
  signal("SIGTERM");
  const timer = setTimeout(() => signal("SIGKILL"), 15_000);
  await exited;
  clearTimeout(timer);
  signal("SIGKILL"); // whatever it left behind in its group
}

/**
 * The request counts of `route` by status code, from the Prometheus text of
 * forelead_request_duration_seconds.
 */
function requestCounts(text: string, route: string): Map<string, number> {
  const counts = new Map<string, number>();
  for (const line of text.split("\n")) {
    if (!line.startsWith("forelead_request_duration_seconds_count{")) continue;
    const labels = Object.fromEntries(
      [...line.matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((m) => [m[1], m[2]]),
    );
    if (labels.route !== route) continue;
    const code = labels.code ?? "";
    counts.set(code, (counts.get(code) ?? 0) + Number(line.slice(line.lastIndexOf(" ") + 1)));
  }
  return counts;
}
