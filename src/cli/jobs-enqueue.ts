import { readFile } from "node:fs/promises";
import { Command, Option } from "commander";
import { toJsonString } from "@bufbuild/protobuf";
import {
  AdminService,
  EnqueueJobResponseSchema,
  GetJobResponseSchema,
} from "../../gen/forelead/admin/v1/admin_pb.js";
import type { Job } from "../../gen/forelead/runner/v1/job_pb.js";
import { secondsFlag } from "./admin-flags.js";
import { withAdminClientOptions, withService, type AdminClientFlags } from "./connection.js";
import { statusLine } from "./follow.js";
import { formatEntry, readJobStream } from "./job-output.js";
import { enqueueBatch } from "./jobs-batch.js";
import { collect, collectList, integerIn } from "./options.js";

interface EnqueueFlags extends AdminClientFlags {
  workspace?: string;
  batch?: string;
  label: string[];
  labels: string[];
  image?: string;
  env: string[];
  secretsFile?: string;
  secretFile: string[];
  timeout?: number;
  priority?: number;
  fairnessKey?: string;
  rateLimit?: string;
  maxAttempts?: number;
  idempotencyKey?: string;
  name?: string;
  repository?: string;
  branch?: string;
  kind?: string;
  wait?: boolean;
  waitTimeout?: number;
  quiet?: boolean;
  idOnly?: boolean;
  json?: boolean;
}

/**
 * The exit code `jobs enqueue --wait` ends with when the job was cancelled (as a shell reports an
 * interrupt).
 */
const cancelledExitCode = 130;

/** The exit code when --wait-timeout passes first (as timeout(1) reports it). */
const waitTimeoutExitCode = 124;

/** The states a job's log stream ends in. */
const settledStates = new Set(["succeeded", "failed", "cancelled"]);

/** `forelead jobs enqueue`: EnqueueJob, and with --wait the job's log live and its exit code. */
export function enqueueCommand(
  write: (text: string) => void = (t) => process.stdout.write(t),
  warn: (text: string) => void = (t) => process.stderr.write(t),
): Command {
  return withAdminClientOptions(
    new Command("enqueue")
      .description(
        "enqueue a job (argv after --), or with --batch FILE many in one " +
          "request; with --wait print its log as it runs and exit with its exit " +
          "code",
      )
      .argument(
        "[argv...]",
        "the command the job runs, after --: forelead jobs enqueue --workspace w1 -- make test",
      )
      .option(
        "--workspace <id>",
        "the job's workspace (required without --batch; with it, the default of the file's jobs)",
      )
      .option(
        "--batch <file>",
        "enqueue the jobs of FILE in one request, all or nothing: EnqueueJob " +
          'requests (proto3 JSON) one a line or as a JSON array, "-" for stdin; ' +
          "the flags given are every job's defaults",
      )
      .option(
        "--label <label>",
        "a runner label the job needs (repeatable: all of them)",
        collect,
        [] as string[],
      )
      .option(
        "--labels <list>",
        "runner labels the job needs, comma separated (as runner --labels); adds to --label",
        collectList,
        [] as string[],
      )
      .option("--image <image>", "the container image (the docker executor runs argv in it)")
      .option(
        "--env <KEY=VALUE>",
        "an environment variable of the job (repeatable); not for credentials: use --secrets-file",
        collect,
        [] as string[],
      )
      .option(
        "--secrets-file <file>",
        "credentials for the job's environment: KEY=VALUE lines (# comments) or " +
          "a JSON object; stored encrypted, never printed",
      )
      .option(
        "--secret-file <NAME=PATH>",
        "a secret delivered to the job as the file NAME, with the content of PATH (repeatable)",
        collect,
        [] as string[],
      )
      .addOption(
        new Option(
          "--timeout <duration>",
          "how long the job may run, e.g. 10m, 2h (default: the server's --default-job-timeout)",
        ).argParser(secondsFlag("--timeout", { wholeSeconds: true })),
      )
      .addOption(
        new Option("--priority <n>", "higher runs first; ties go to the oldest").argParser(
          integerIn("--priority", -1_000_000, 1_000_000),
        ),
      )
      .option(
        "--fairness-key <key>",
        "a tenant or user within the workspace: at equal priority keys are served in " +
          "proportion to their weights (PUT /v1/admin/fairness-keys/{key})",
      )
      .option(
        "--rate-limit <name>",
        "the rate limit the job starts under (PUT /v1/admin/rate-limits/{name})",
      )
      .addOption(
        new Option(
          "--max-attempts <n>",
          "claims allowed before the job fails (default 3)",
        ).argParser(integerIn("--max-attempts", 1, 100)),
      )
      .option(
        "--name <text>",
        "what people see the job called in lists and pages (at most 200 characters)",
      )
      .option(
        "--idempotency-key <key>",
        "the same key in the same workspace returns the same job instead of a new one",
      )
      .option("--repository <name>", "a registered repository: the job runs in its checkout")
      .option("--branch <branch>", "the repository's branch (default: its default branch)")
      .addOption(
        new Option(
          "--kind <kind>",
          "the job's kind (default: checkout with --repository, else command)",
        ).choices(["command", "checkout", "agent"]),
      )
      .option(
        "--wait",
        `follow the job until it settles, printing its log, and exit with its ` +
          `exit code (failed without one: 1; cancelled: ${cancelledExitCode})`,
      )
      .addOption(
        new Option(
          "--wait-timeout <duration>",
          `with --wait: stop waiting after this long (e.g. 30s, 10m) and exit ` +
            `${waitTimeoutExitCode}; the job stays enqueued`,
        ).argParser(secondsFlag("--wait-timeout", { wholeSeconds: true })),
      )
      .option(
        "--quiet",
        "print nothing on stderr but errors and why a wait stopped (with --wait: no log either)",
      )
      .option(
        "--id-only",
        "print only the job's id on stdout (with --wait: the id, not the log; the exit code still tells)",
      )
      .option(
        "--json",
        "print the enqueue reply as proto3 JSON (with --wait: the settled job, the log on stderr)",
      ),
  ).action(async (argv: string[], flags: EnqueueFlags, command: Command) => {
    if (!flags.workspace && flags.batch === undefined)
      command.error("error: required option '--workspace <id>' not specified");
    if (flags.waitTimeout !== undefined && !flags.wait)
      command.error("error: --wait-timeout needs --wait");
    if (flags.idOnly && flags.json) command.error("error: --id-only and --json exclude each other");
    const say = flags.quiet ? () => {} : warn;
    const [env, secrets, secretFiles] = await Promise.all([
      Promise.resolve(keyValues(flags.env, "--env")),
      readSecretsFile(flags.secretsFile),
      readSecretFiles(flags.secretFile),
    ]);
    const request = {
      apiVersion: "v1",
      workspaceId: flags.workspace ?? "",
      labels: [...flags.label, ...flags.labels],
      repository: flags.repository ?? "",
      targetBranch: flags.branch ?? "",
      kind: flags.kind ?? "",
      spec: { image: flags.image ?? "", argv, env, timeoutSeconds: flags.timeout ?? 0 },
      priority: flags.priority ?? 0,
      fairnessKey: flags.fairnessKey ?? "",
      rateLimit: flags.rateLimit ?? "",
      maxAttempts: flags.maxAttempts ?? 0,
      idempotencyKey: flags.idempotencyKey ?? "",
      displayName: flags.name ?? "",
      secrets,
      secretFiles,
    };
    if (flags.batch !== undefined) {
      if (flags.wait)
        command.error("error: --wait follows one job; it does not apply with --batch");
      if (flags.idempotencyKey)
        command.error(
          "error: --idempotency-key names one job; with --batch give each job its own idempotencyKey in the file",
        );
      return enqueueBatch(flags.batch, request, flags, write);
    }
    await withService(flags, AdminService, async (admin) => {
      const reply = await admin.enqueueJob(request);
      const job = reply.job;
      if (!job) throw new Error("the control plane's enqueue reply has no job");
      // Running already: leased in the enqueue to a runner that was waiting (the direct handoff).
      const where =
        `${job.state === "running" && job.runnerId ? ` on runner ${job.runnerId}` : ""} ` +
        `in workspace ${job.workspaceId}`;
      const waiting = job.waiting?.message ? `: waiting: ${job.waiting.message}` : "";
      if (flags.idOnly) write(`${job.id}\n`);
      if (!flags.wait) {
        if (!flags.idOnly)
          write(
            flags.json
              ? `${toJsonString(EnqueueJobResponseSchema, reply)}\n`
              : `job ${job.id} ${job.state}${where}${waiting}\n`,
          );
        return;
      }
      // Off a terminal the status line is not drawn: the waiting reason is said here, once.
      say(`forelead: job ${job.id} ${job.state}${where}${process.stderr.isTTY ? "" : waiting}\n`);
      const status = flags.quiet
        ? undefined
        : statusLine(
            `job ${job.id} ${job.state}${job.waiting?.message ? `: ${job.waiting.message}` : ""}`,
          );
      const log = flags.quiet || flags.idOnly ? () => {} : flags.json ? warn : write;
      const deadline = new AbortController();
      const timer =
        flags.waitTimeout === undefined
          ? undefined
          : setTimeout(() => deadline.abort(), flags.waitTimeout * 1000);
      try {
        await readJobStream(
          admin,
          "logs",
          { jobId: job.id, follow: true, warn: say, signal: deadline.signal },
          (entry) => {
            status?.stop();
            log(formatEntry("logs", entry, false));
          },
        );
      } finally {
        clearTimeout(timer);
        status?.stop();
      }
      const final = await admin.getJob({ jobId: job.id });
      if (deadline.signal.aborted && !settledStates.has(final.job!.state)) {
        const now = final.job!;
        const reason = now.waiting?.message ? `: waiting: ${now.waiting.message}` : "";
        warn(
          `forelead: job ${now.id} still ${now.state} after --wait-timeout ` +
            `${flags.waitTimeout}s${reason}; it stays enqueued: follow it with ` +
            `forelead jobs logs --follow ${now.id}, or cancel it with forelead jobs cancel ${now.id}\n`,
        );
        process.exitCode = waitTimeoutExitCode;
        return;
      }
      const settled = final.job!;
      if (flags.json) write(`${toJsonString(GetJobResponseSchema, final)}\n`);
      const code = jobExitCode(settled);
      say(
        `forelead: job ${settled.id} ` +
          `${settled.state}` +
          `${settled.exitCode !== undefined ? ` with exit code ${settled.exitCode}` : ""}` +
          `${outcomeReason(settled)}\n`,
      );
      process.exitCode = code;
    });
  });
}

/**
 * The exit code `--wait` ends with: the job's own when it ran to one; 1 for a failure without one;
 * 130 when cancelled.
 */
function jobExitCode(job: Job): number {
  if (job.state === "cancelled") return cancelledExitCode;
  if (job.state === "succeeded") return job.exitCode ?? 0;
  return job.exitCode !== undefined && job.exitCode !== 0 ? job.exitCode : 1;
}

/** Why a job did not succeed, for the last line: its error or the control plane's failure. */
export function outcomeReason(job: Job): string {
  if (job.error?.code)
    return `: ${job.error.code}${job.error.message ? ` (${job.error.message})` : ""}`;
  if (job.failure?.reason)
    return `: ${job.failure.reason}${job.failure.message ? ` (${job.failure.message})` : ""}`;
  return "";
}

/** KEY=VALUE flag values as a map; an error names the flag and the key, never the value. */
function keyValues(values: readonly string[], flag: string): Record<string, string> {
  const map: Record<string, string> = {};
  for (const v of values) {
    const eq = v.indexOf("=");
    if (eq <= 0)
      throw new Error(
        `${flag} takes KEY=VALUE; got one without a key or an "=" ` +
          `(${JSON.stringify(v.slice(0, Math.max(0, eq)) || "(empty key)")})`,
      );
    map[v.slice(0, eq)] = v.slice(eq + 1);
  }
  return map;
}

/**
 * The --secrets-file: a JSON object of strings, or KEY=VALUE lines (blank
 * lines and # comments skipped; the value is everything after the first
 * "="). Errors name the file and the line or key, never a value.
 */
async function readSecretsFile(file: string | undefined): Promise<Record<string, string>> {
  if (!file) return {};
  const text = await readFile(file, "utf8").catch((err: NodeJS.ErrnoException) => {
    throw new Error(`--secrets-file ${file}: cannot read it (${err.code ?? err.message})`);
  });
  if (text.trimStart().startsWith("{")) {
    let data: unknown;
    try {
      data = JSON.parse(text);
    } catch {
      throw new Error(
        `--secrets-file ${file}: starts with "{" but is not valid JSON (an object of names to string values)`,
      );
    }
    const map: Record<string, string> = {};
    for (const [key, value] of Object.entries(data as Record<string, unknown>)) {
      if (typeof value !== "string")
        throw new Error(
          `--secrets-file ${file}: the value of ${JSON.stringify(key)} is not a string`,
        );
      map[key] = value;
    }
    return map;
  }
  const map: Record<string, string> = {};
  text.split(/\r?\n/).forEach((line, i) => {
    if (line.trim() === "" || line.trimStart().startsWith("#")) return;
    const eq = line.indexOf("=");
    if (eq <= 0) throw new Error(`--secrets-file ${file} line ${i + 1}: not KEY=VALUE`);
    map[line.slice(0, eq).trim()] = line.slice(eq + 1);
  });
  return map;
}

/** --secret-file NAME=PATH values as file name to content. */
async function readSecretFiles(values: readonly string[]): Promise<Record<string, string>> {
  const files: Record<string, string> = {};
  for (const [name, path] of Object.entries(keyValues(values, "--secret-file"))) {
    files[name] = await readFile(path, "utf8").catch((err: NodeJS.ErrnoException) => {
      throw new Error(`--secret-file ${name}=${path}: cannot read it (${err.code ?? err.message})`);
    });
  }
  return files;
}
