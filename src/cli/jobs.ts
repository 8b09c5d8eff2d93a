import { createHash, randomBytes } from "node:crypto";
import { open, readFile, rename, rm } from "node:fs/promises";
import { basename } from "node:path";
import { Command } from "commander";
import { createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { AdminService } from "../../gen/forelead/admin/v1/admin_pb.js";

interface ConnectionFlags {
  server: string;
  cert: string;
  key: string;
  ca: string;
}

interface DownloadFlags extends ConnectionFlags {
  out?: string;
  force?: boolean;
}

/** `forelead jobs ...`: an admin identity reading jobs' results. */
export function jobsCommand(): Command {
  const jobs = new Command("jobs").description("read jobs' results as an admin identity (a certificate granted with serve --admin)");
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
