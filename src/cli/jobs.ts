import { createHash, randomBytes } from "node:crypto";
import { open, rename, rm } from "node:fs/promises";
import { basename } from "node:path";
import { Command, Option } from "commander";
import type { Client } from "@connectrpc/connect";
import { toJsonString } from "@bufbuild/protobuf";
import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import {
  AdminService,
  CancelJobResponseSchema,
  GetJobResponseSchema,
  ListJobsResponseSchema,
  type ListJobsResponse,
} from "../../gen/forelead/admin/v1/admin_pb.js";
import type { Job, JobAttempt, JobProgress } from "../../gen/forelead/runner/v1/job_pb.js";
import { progressPercent, progressText } from "../protocol/progress-text.js";
import { withAdminClientOptions, withService, type AdminClientFlags } from "./connection.js";
import { formatTable } from "./doctor.js";
import { resolveJobId } from "./job-ids.js";
import { formatEntry, readJobStream, type JobStream } from "./job-output.js";
import { enqueueCommand, outcomeReason } from "./jobs-enqueue.js";
import { integerIn } from "./options.js";
import { timeForms } from "./stats.js";

type ConnectionFlags = AdminClientFlags;

interface JsonFlags extends AdminClientFlags {
  json?: boolean;
}

interface StreamFlags extends JsonFlags {
  follow?: boolean;
  attempt?: number;
}

interface ListFlags extends ConnectionFlags {
  workspace?: string;
  since?: string;
  until?: string;
  state: string[];
  label: string[];
  runner?: string;
  order?: string;
  pageSize?: string;
  pageToken?: string;
  json?: boolean;
}

interface DownloadFlags extends ConnectionFlags {
  out?: string;
  force?: boolean;
}

/** How get, cancel, logs and events name their job. */
const jobArgument = "job id, or its last 8 or more characters";

/** `forelead jobs ...`: an admin identity reading jobs' results. */
export function jobsCommand(
  write: (text: string) => void = (t) => process.stdout.write(t),
  warn: (text: string) => void = (t) => process.stderr.write(t),
): Command {
  const jobs = new Command("jobs");
  jobs.addCommand(enqueueCommand(write, warn));
  withAdminClientOptions(
    jobs
      .command("get")
      .description("one job: state, attempts, runner, exit code, error, why it waits")
      .argument("<job>", jobArgument)
      .option("--json", "print the reply as proto3 JSON"),
  ).action(async (id: string, flags: JsonFlags) => {
    await withAdmin(flags, async (admin) => {
      const reply = await admin.getJob({ jobId: await resolveJobId(admin, id) });
      write(flags.json ? `${toJsonString(GetJobResponseSchema, reply)}\n` : formatJob(reply.job!));
    });
  });
  withAdminClientOptions(
    jobs
      .command("cancel")
      .description("cancel a job: at once when queued, through its runner when running")
      .argument("<job>", jobArgument)
      .option("--json", "print the reply as proto3 JSON"),
  ).action(async (id: string, flags: JsonFlags) => {
    await withAdmin(flags, async (admin) => {
      const reply = await admin.cancelJob({
        apiVersion: "v1",
        jobId: await resolveJobId(admin, id),
      });
      const job = reply.job!;
      write(
        flags.json
          ? `${toJsonString(CancelJobResponseSchema, reply)}\n`
          : `job ${job.id} ` +
              `${job.state === "running" && job.cancelRequested ? "running: cancel requested, its runner stops it" : job.state}\n`,
      );
    });
  });
  for (const stream of ["logs", "events"] as const) {
    withAdminClientOptions(
      jobs
        .command(stream)
        .description(
          stream === "logs"
            ? "a job's log as plain text, in order across attempts; --follow: live " +
                "until the job settles, resuming after a dropped connection"
            : "a job's events (runner-reported), in order across attempts; --follow: live until the job settles",
        )
        .argument("<job>", jobArgument)
        .option(
          "--follow",
          "keep printing until the job settles; reconnects after a dropped connection without a gap or a duplicate",
        )
        .addOption(
          new Option("--attempt <n>", "only this attempt").argParser(
            integerIn("--attempt", 1, 1000),
          ),
        )
        .option("--json", "one proto3 JSON object per entry and line"),
    ).action(async (id: string, flags: StreamFlags) => {
      await withAdmin(flags, async (admin) =>
        printStream(admin, stream, await resolveJobId(admin, id), flags, write, warn),
      );
    });
  }
  const repeat = (value: string, previous: string[]) => [...previous, value];
  withAdminClientOptions(
    jobs
      .command("list")
      .description(
        "job history, newest first (or --order oldest: the queue as it is claimed); a queued job says why it waits",
      )
      .option("--workspace <id>", "only this workspace")
      .option("--since <time>", `jobs created at or after: ${timeForms}`)
      .option("--until <time>", "jobs created before, in the same forms")
      .option(
        "--state <state>",
        "queued, running, waiting_input, succeeded, failed or cancelled (repeatable: any of them)",
        repeat,
        [] as string[],
      )
      .option(
        "--label <label>",
        "jobs whose labels include this one (repeatable: all of them)",
        repeat,
        [] as string[],
      )
      .option("--runner <id>", "jobs a lease of this runner ever held")
      .option("--order <order>", "newest or oldest", "newest")
      .option("--page-size <n>", "1..500", "50")
      .option("--page-token <token>", "the next page, as the previous page named it")
      .option("--json", "print the reply as JSON"),
  ).action(async (flags: ListFlags) => {
    await withAdmin(flags, async (admin) => {
      const page = await admin.listJobs({
        workspaceId: flags.workspace ?? "",
        since: flags.since ?? "",
        until: flags.until ?? "",
        states: flags.state,
        labels: flags.label,
        runnerId: flags.runner ?? "",
        order: flags.order ?? "",
        pageSize: Number(flags.pageSize),
        pageToken: flags.pageToken ?? "",
      });
      write(flags.json ? `${toJsonString(ListJobsResponseSchema, page)}\n` : formatJobs(page));
    });
  });
  withAdminClientOptions(
    jobs
      .command("artifacts")
      .description("list the artifacts a job's completion recorded: name, size, digest, media type")
      .argument("<job>", "job id"),
  ).action(async (jobId: string, flags: ConnectionFlags) => {
    await withAdmin(flags, async (admin) => {
      const { artifacts } = await admin.listJobArtifacts({ jobId });
      for (const a of artifacts) console.log(`${a.name}\t${a.size}\t${a.digest}\t${a.mediaType}`);
      if (artifacts.length === 0) console.error(`job ${jobId} lists no artifacts`);
    });
  });
  withAdminClientOptions(
    jobs
      .command("download")
      .description("download one artifact of a job, checked against its digest")
      .argument("<job>", "job id")
      .argument("<name>", "the artifact's name, e.g. reports/junit.xml")
      .option(
        "--out <file>",
        "where to write it (- for standard output); default: the name's last segment here",
      )
      .option("--force", "replace an existing file"),
  ).action(async (jobId: string, name: string, flags: DownloadFlags) => {
    await withAdmin(flags, (admin) =>
      download(admin, jobId, name, flags.out ?? basename(name), flags.force ?? false),
    );
  });
  return jobs;
}

/**
 * The text `forelead jobs list` prints: a row per job, then the next page's token when there is
 * one.
 */
function formatJobs(page: ListJobsResponse): string {
  const rows = page.jobs.map((j) => [
    j.id,
    shortName(j.displayName),
    j.state,
    j.workspaceId,
    j.labels.join(",") || "-",
    String(j.attempts ?? 0),
    j.runnerId || j.attemptHistory.at(-1)?.runnerId || "-",
    lastDuration(j),
    j.createdAt ? timestampDate(j.createdAt).toISOString() : "-",
    j.waiting?.message
      ? `waiting: ${j.waiting.message}`
      : j.error?.code
        ? `error: ${j.error.code}`
        : "",
  ]);
  const lines =
    page.jobs.length === 0
      ? ["no jobs"]
      : formatTable([
          [
            "job",
            "name",
            "state",
            "workspace",
            "labels",
            "attempts",
            "runner",
            "duration",
            "created",
            "",
          ],
          ...rows,
        ]);
  if (page.nextPageToken) lines.push(`more: --page-token ${page.nextPageToken}`);
  return lines.join("\n") + "\n";
}

/** The last attempt's duration ("-" before the first): what `jobs list` shows per job. */
function lastDuration(j: Job): string {
  const last = j.attemptHistory.at(-1);
  return last ? formatDurationMs(Number(last.durationMs)) : "-";
}

/** Most characters of a job's name in `jobs list`; a longer one is cut with "…". */
const maxListedNameChars = 32;

/** A job's name as a `jobs list` cell: "-" for none, cut to maxListedNameChars. */
function shortName(name: string): string {
  const chars = [...name];
  if (chars.length === 0) return "-";
  return chars.length > maxListedNameChars
    ? `${chars.slice(0, maxListedNameChars - 1).join("")}…`
    : name;
}

/** A duration as people read it: 850ms, 12.3s, 4m05s, 2h03m. */
function formatDurationMs(ms: number): string {
  if (ms < 1000) return `${ms}ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)}s`;
  const pad = (n: number) => String(Math.floor(n)).padStart(2, "0");
  if (s < 3600) return `${Math.floor(s / 60)}m${pad(s % 60)}s`;
  return `${Math.floor(s / 3600)}h${pad((s % 3600) / 60)}m`;
}

/**
 * One attempt as `jobs get` prints it: "#2 r1 (process) succeeded exit 0, 12.3s, from … to …".
 */
function attemptLine(a: JobAttempt): string {
  const at = (t: Timestamp | undefined) => (t ? timestampDate(t).toISOString() : "now");
  return (
    `#${a.attempt} ${a.runnerId}${a.executor ? ` (${a.executor})` : ""} ${a.outcome}` +
    `${a.exitCode !== undefined ? ` exit ${a.exitCode}` : ""}` +
    `${a.cancelledBy ? ` by ${a.cancelledBy}` : ""}, ${formatDurationMs(Number(a.durationMs))}, ` +
    `from ${at(a.startedAt)} to ${at(a.endedAt)}`
  );
}

async function withAdmin(
  flags: ConnectionFlags,
  use: (admin: Client<typeof AdminService>) => Promise<void>,
): Promise<void> {
  await withService(flags, AdminService, use);
}

async function printStream(
  admin: Client<typeof AdminService>,
  stream: JobStream,
  jobId: string,
  flags: StreamFlags,
  write: (text: string) => void,
  warn: (text: string) => void,
): Promise<void> {
  await readJobStream(
    admin,
    stream,
    { jobId, attempt: flags.attempt, follow: flags.follow ?? false, warn },
    (entry) => write(formatEntry(stream, entry, flags.json ?? false)),
  );
}

/** The text `forelead jobs get` prints: one "name: value" line per field that is set. */
function formatJob(j: Job): string {
  const at = (t: Timestamp | undefined) => (t ? timestampDate(t).toISOString() : undefined);
  const result = j.result ? JSON.stringify(j.result) : "";
  const rows: Array<[string, string | undefined]> = [
    ["job", j.id],
    ["name", j.displayName || undefined],
    [
      "state",
      `${j.state}${j.cancelRequested && j.state === "running" ? " (cancel requested)" : ""}`,
    ],
    ["workspace", j.workspaceId],
    ["kind", j.kind],
    ["labels", j.labels.join(",") || undefined],
    [
      "repository",
      j.repository
        ? `${j.repository}${j.targetBranch ? ` (${j.targetBranch})` : ""}${j.baseCommit ? ` at ${j.baseCommit}` : ""}`
        : undefined,
    ],
    ["image", j.spec?.image || undefined],
    ["argv", j.spec?.argv.length ? JSON.stringify(j.spec.argv) : undefined],
    ["timeout", j.spec?.timeoutSeconds ? `${j.spec.timeoutSeconds}s` : undefined],
    ["priority", String(j.priority)],
    ["fairness key", j.fairnessKey || undefined],
    ["rate limit", j.rateLimit || undefined],
    ["attempts", `${j.attempts ?? 0} of ${j.maxAttempts}`],
    ["runner", j.runnerId || undefined],
    ["lease until", at(j.leaseExpiresAt)],
    ["exit code", j.exitCode !== undefined ? String(j.exitCode) : undefined],
    ["outcome", outcomeReason(j).replace(/^: /, "") || undefined],
    ["waiting", j.waiting?.message ? `${j.waiting.code}: ${j.waiting.message}` : undefined],
    ["progress", j.progress ? progressLine(j.progress) : undefined],
    ["result", result.length <= maxInlineResultChars ? result : "(below)"],
    [
      "secrets",
      [...j.secretNames, ...j.secretFileNames.map((n) => `file ${n}`)].join(", ") || undefined,
    ],
    ["artifacts", j.artifacts.length ? j.artifacts.map((a) => a.name).join(", ") : undefined],
    ["created", at(j.createdAt)],
    ["settled", at(j.settledAt)],
    ...j.attemptHistory.map((a): [string, string] => ["attempt", attemptLine(a)]),
  ];
  return (
    formatTable(
      rows
        .filter((r): r is [string, string] => r[1] !== undefined && r[1] !== "")
        .map(([k, v]) => [`${k}:`, v]),
    ).join("\n") +
    "\n" +
    (result.length > maxInlineResultChars
      ? `result JSON:\n${JSON.stringify(j.result, null, 2)}\n`
      : "")
  );
}

/** A result up to this long is shown on its own line of `jobs get`; a longer one, indented below. */
const maxInlineResultChars = 80;

/** Cells of the progress bar of `jobs get`. */
const progressBarCells = 20;

/** "[########------------] 3/10 (30%) at 2026-…": the bar when the figures give a percent. */
function progressLine(p: JobProgress): string {
  const percent = progressPercent(p);
  const filled = percent === undefined ? 0 : Math.round((percent / 100) * progressBarCells);
  const bar =
    percent === undefined ? "" : `[${"#".repeat(filled)}${"-".repeat(progressBarCells - filled)}] `;
  const when = p.updatedAt ? ` at ${timestampDate(p.updatedAt).toISOString()}` : "";
  return `${bar}${progressText(p)}${when}`;
}

/**
 * Streams the artifact to a temporary file beside `out` and renames it into
 * place only when its bytes hash to the digest the control plane stated, so
 * a broken download never leaves a plausible-looking file behind.
 */
async function download(
  admin: Client<typeof AdminService>,
  jobId: string,
  name: string,
  out: string,
  force: boolean,
): Promise<void> {
  const toStdout = out === "-";
  if (!toStdout && !force && (await exists(out)))
    throw new Error(`${out} exists; pass --force to replace it or --out another file`);
  const temp = toStdout ? undefined : `${out}.forelead-${randomBytes(6).toString("hex")}.part`;
  const file = temp ? await open(temp, "wx", 0o644) : undefined;
  const hash = createHash("sha256");
  let stated: { digest: string; size: bigint } | undefined;
  let size = 0;
  try {
    for await (const chunk of admin.downloadArtifact({ jobId, name })) {
      stated ??= { digest: chunk.digest, size: chunk.size };
      hash.update(chunk.data);
      size += chunk.data.length;
      if (file) await file.write(chunk.data);
      else if (!process.stdout.write(chunk.data))
        await new Promise((resolve) => process.stdout.once("drain", resolve));
    }
    const digest = `sha256:${hash.digest("hex")}`;
    if (!stated || digest !== stated.digest || BigInt(size) !== stated.size) {
      throw new Error(
        `the download of ${name} hashed to ${digest} (${size} bytes), not the ` +
          `stated ${stated?.digest ?? "(nothing)"}; nothing was written`,
      );
    }
    if (file && temp) {
      await file.sync();
      await file.close();
      await rename(temp, out);
      console.error(`wrote ${out} (${size} bytes, ${digest})`);
    }
  } finally {
    await file?.close().catch(() => {});
    if (temp) await rm(temp, { force: true });
  }
}

async function exists(path: string): Promise<boolean> {
  try {
    await (await open(path, "r")).close();
    return true;
  } catch {
    return false;
  }
}
