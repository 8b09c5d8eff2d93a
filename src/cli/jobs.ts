import { createHash, randomBytes } from "node:crypto";
import { open, readFile, rename, rm } from "node:fs/promises";
import { basename } from "node:path";
import { Command } from "commander";
import { createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { toJsonString } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { AdminService, ListJobsResponseSchema, type ListJobsResponse } from "../../gen/forelead/admin/v1/admin_pb.js";
import { formatTable } from "./doctor.js";
import { timeForms } from "./stats.js";

interface ConnectionFlags {
  server: string;
  cert: string;
  key: string;
  ca: string;
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

/** `forelead jobs ...`: an admin identity reading jobs' results. */
export function jobsCommand(write: (text: string) => void = (t) => process.stdout.write(t)): Command {
  const jobs = new Command("jobs").description("read jobs' results as an admin identity (a certificate granted with serve --admin)");
  const repeat = (value: string, previous: string[]) => [...previous, value];
  connectionOptions(
    jobs
      .command("list")
      .description("job history, newest first (or --order oldest: the queue as it is claimed); a queued job says why it waits")
      .option("--workspace <id>", "only this workspace")
      .option("--since <time>", `jobs created at or after: ${timeForms}`)
      .option("--until <time>", "jobs created before, in the same forms")
      .option("--state <state>", "queued, running, waiting_input, succeeded, failed or cancelled (repeatable: any of them)", repeat, [] as string[])
      .option("--label <label>", "jobs whose labels include this one (repeatable: all of them)", repeat, [] as string[])
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
  connectionOptions(
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
  connectionOptions(
    jobs
      .command("download")
      .description("download one artifact of a job, checked against its digest")
      .argument("<job>", "job id")
      .argument("<name>", "the artifact's name, e.g. reports/junit.xml")
      .option("--out <file>", "where to write it (- for standard output); default: the name's last segment here")
      .option("--force", "replace an existing file"),
  ).action(async (jobId: string, name: string, flags: DownloadFlags) => {
    await withAdmin(flags, (admin) => download(admin, jobId, name, flags.out ?? basename(name), flags.force ?? false));
  });
  return jobs;
}

/** The text `forelead jobs list` prints: a row per job, then the next page's token when there is one. */
export function formatJobs(page: ListJobsResponse): string {
  const rows = page.jobs.map((j) => [
    j.id,
    j.state,
    j.workspaceId,
    j.labels.join(",") || "-",
    String(j.attempts ?? 0),
    j.runnerId || "-",
    j.createdAt ? timestampDate(j.createdAt).toISOString() : "-",
    j.waiting?.message ? `waiting: ${j.waiting.message}` : j.error?.code ? `error: ${j.error.code}` : "",
  ]);
  const lines = page.jobs.length === 0 ? ["no jobs"] : formatTable([["job", "state", "workspace", "labels", "attempts", "runner", "created", ""], ...rows]);
  if (page.nextPageToken) lines.push(`more: --page-token ${page.nextPageToken}`);
  return lines.join("\n") + "\n";
}

function connectionOptions(command: Command): Command {
  return command
    .option("--server <url>", "the control plane", "https://127.0.0.1:8443")
    .requiredOption("--cert <file>", "client certificate (PEM) of an identity granted the admin routes")
    .requiredOption("--key <file>", "its private key (PEM)")
    .option("--ca <file>", "CA bundle that signed the server certificate", "certs/ca.pem");
}

async function withAdmin(flags: ConnectionFlags, use: (admin: Client<typeof AdminService>) => Promise<void>): Promise<void> {
  const nodeOptions = { ca: await readFile(flags.ca), cert: await readFile(flags.cert), key: await readFile(flags.key) };
  const sessionManager = new Http2SessionManager(flags.server, {}, nodeOptions);
  try {
    await use(createClient(AdminService, createConnectTransport({ baseUrl: flags.server, httpVersion: "2", sessionManager, nodeOptions, useBinaryFormat: true })));
  } finally {
    sessionManager.abort(); // the command is done: let the process exit
  }
}

/**
 * Streams the artifact to a temporary file beside `out` and renames it into
 * place only when its bytes hash to the digest the control plane stated, so
 * a broken download never leaves a plausible-looking file behind.
 */
async function download(admin: Client<typeof AdminService>, jobId: string, name: string, out: string, force: boolean): Promise<void> {
  const toStdout = out === "-";
  if (!toStdout && !force && (await exists(out))) throw new Error(`${out} exists; pass --force to replace it or --out another file`);
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
      else if (!process.stdout.write(chunk.data)) await new Promise((resolve) => process.stdout.once("drain", resolve));
    }
    const digest = `sha256:${hash.digest("hex")}`;
    if (!stated || digest !== stated.digest || BigInt(size) !== stated.size) {
      throw new Error(`the download of ${name} hashed to ${digest} (${size} bytes), not the stated ${stated?.digest ?? "(nothing)"}; nothing was written`);
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
