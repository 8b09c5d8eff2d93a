import { createHash } from "node:crypto";
import { constants as fsConstants, type Stats } from "node:fs";
import { lstat, open, readdir, readlink, realpath, type FileHandle } from "node:fs/promises";
import { extname, join } from "node:path";
import { Code, ConnectError, type Client } from "@connectrpc/connect";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type {
  PutUploadRequestSchema,
  RunnerService,
} from "../../../gen/forelead/runner/v1/runner_pb.js";
import { artifactNameProblem } from "../../artifacts/names.js";

/** The calls the uploader makes; a generated RunnerService client has them. */
export type UploadClient = Pick<
  Client<typeof RunnerService>,
  "openUpload" | "putUpload" | "finalizeUpload"
>;

/** What to upload and how hard to try. */
export interface UploadOutputOptions {
  readonly client: UploadClient;
  readonly jobId: string;
  readonly leaseToken: string;
  /** The job's output directory (what the container saw as /output). */
  readonly dir: string;
  /**
   * Bytes per put message; 256 KiB by default (the control plane takes at most 1 MiB per message).
   */
  readonly chunkBytes?: number;
  /** Tries per request before giving up on a file; 6 by default. */
  readonly attempts?: number;
  /** Wait before the first retry, doubled each time; 200 ms by default. */
  readonly retryDelayMs?: number;
  /** Most files uploaded (the control plane takes at most 4096 in a manifest). */
  readonly maxFiles?: number;
  readonly signal?: AbortSignal;
}

/** One uploaded file, as the completion's manifest lists it. */
interface OutputArtifact {
  readonly name: string;
  readonly digest: string;
  readonly size: bigint;
  readonly mediaType: string;
}

/** The result of an upload: the manifest for complete, and what was left out and why. */
export interface OutputManifest {
  readonly artifacts: OutputArtifact[];
  readonly skipped: Array<{ readonly name: string; readonly reason: string }>;
}

const apiVersion = "v1";
type PutMessage = MessageInitShape<typeof PutUploadRequestSchema>;
/** The fields naming an upload under its lease. */
interface UploadHead {
  readonly apiVersion: string;
  readonly jobId: string;
  readonly leaseToken: string;
  readonly uploadId: string;
}

/**
 * Uploads every regular file under `dir` and returns the manifest for
 * complete. Nothing outside `dir` is ever read: entries are examined with
 * lstat and symbolic links are never followed (a link is skipped, wherever
 * it points); each file is opened with O_NOFOLLOW and must be the very
 * inode that was examined, inside the real `dir` (checked through
 * /proc/self/fd where it exists), so a path swapped mid-walk is refused.
 * Each file is hashed first, then sent in chunks; after a failed put the
 * upload resumes from the durable size the control plane reports.
 */
export async function uploadOutput(options: UploadOutputOptions): Promise<OutputManifest> {
  const result: OutputManifest = { artifacts: [], skipped: [] };
  let root: Stats;
  try {
    root = await lstat(options.dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return result; // the job wrote nothing
    throw err;
  }
  if (!root.isDirectory()) {
    result.skipped.push({
      name: ".",
      reason: "the output directory is not a directory (a symbolic link is not followed)",
    });
    return result;
  }
  const realRoot = await realpath(options.dir);
  const maxFiles = options.maxFiles ?? 4096;
  for await (const entry of walk(options.dir, "", result.skipped)) {
    options.signal?.throwIfAborted();
    if (result.artifacts.length >= maxFiles) {
      result.skipped.push({ name: entry.name, reason: `over the limit of ${maxFiles} files` });
      continue;
    }
    const file = await openExamined(entry.path, entry.stat, realRoot);
    if (typeof file === "string") {
      result.skipped.push({ name: entry.name, reason: file });
      continue;
    }
    try {
      result.artifacts.push(await uploadFile(options, entry.name, file));
    } catch (err) {
      // One file over the control plane's cap is skipped with its reason; the rest still uploads.
      if (!(err instanceof OverCap)) throw err;
      result.skipped.push({ name: entry.name, reason: err.message });
    } finally {
      await file.close();
    }
  }
  return result;
}

/**
 * Regular files under `dir`, depth first in name order; everything else is recorded in `skipped`.
 */
async function* walk(
  dir: string,
  prefix: string,
  skipped: OutputManifest["skipped"],
): AsyncGenerator<{ name: string; path: string; stat: Stats }> {
  const names = (await readdir(dir)).sort();
  for (const base of names) {
    const name = prefix ? `${prefix}/${base}` : base;
    const problem = artifactNameProblem(name);
    if (problem) {
      skipped.push({ name, reason: `the name ${problem}` });
      continue;
    }
    const path = join(dir, base);
    const stat = await lstat(path);
    if (stat.isSymbolicLink()) skipped.push({ name, reason: "a symbolic link (never followed)" });
    else if (stat.isDirectory()) yield* walk(path, name, skipped);
    else if (stat.isFile()) yield { name, path, stat };
    else skipped.push({ name, reason: "not a regular file (a device, FIFO or socket)" });
  }
}

/**
 * Opens the examined file, or says why not: it must still be that regular file, inside the real
 * root (also lifecycle/job-result.ts).
 */
export async function openExamined(
  path: string,
  examined: Stats,
  realRoot: string,
): Promise<FileHandle | string> {
  let file: FileHandle;
  try {
    file = await open(path, fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW | fsConstants.O_NONBLOCK);
  } catch (err) {
    return (
      `cannot be opened without following a link ` +
      `(${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`
    );
  }
  const held = await file.stat();
  let where: string | undefined;
  try {
    where = await readlink(`/proc/self/fd/${file.fd}`);
  } catch {
    where = undefined; // no /proc: the inode check below still holds
  }
  if (
    !held.isFile() ||
    held.ino !== examined.ino ||
    held.dev !== examined.dev ||
    (where !== undefined && !where.startsWith(`${realRoot}/`))
  ) {
    await file.close();
    return "changed while the output was read (not the file that was examined)";
  }
  return file;
}

async function uploadFile(
  options: UploadOutputOptions,
  name: string,
  file: FileHandle,
): Promise<OutputArtifact> {
  const { client, jobId, leaseToken } = options;
  const { digest, size } = await hashFile(file);
  const lease = { apiVersion, jobId, leaseToken };
  const mediaType = mediaTypeOf(name);
  const opened = await retrying(options, `open ${name}`, () =>
    client
      .openUpload(
        { ...lease, name, size: BigInt(size), digest, mediaType },
        { signal: options.signal },
      )
      .catch((err: unknown) => {
        // Opening is refused with resource_exhausted only for a size over the cap.
        if (err instanceof ConnectError && err.code === Code.ResourceExhausted)
          throw new OverCap(err.rawMessage);
        throw err;
      }),
  );
  const head = { ...lease, uploadId: opened.uploadId };
  let durable = Number(opened.durableSize);
  const attempts = options.attempts ?? 6;
  for (let attempt = 1; durable < size; attempt++) {
    try {
      const reply = await client.putUpload(
        chunks(file, head, durable, size, options.chunkBytes ?? 256 * 1024),
        { signal: options.signal },
      );
      durable = Number(reply.durableSize);
    } catch (err) {
      if (attempt >= attempts || !retryable(options, err))
        throw new Error(
          `uploading ${name} failed at ${durable} of ${size} bytes: ${(err as Error).message}`,
        );
      await pause(options, attempt);
      // Resume from what the control plane holds durably (an empty put asks for it).
      const status = await retrying(options, `status of ${name}`, () =>
        client.putUpload(once({ ...head, offset: 0n }), { signal: options.signal }),
      );
      durable = Number(status.durableSize);
    }
  }
  const stored = await retrying(options, `finalize ${name}`, () =>
    client.finalizeUpload({ ...head }, { signal: options.signal }),
  );
  return { name, digest: stored.digest, size: stored.size, mediaType: stored.mediaType };
}

/** "sha256:<hex>" and length of the whole file, read from the open handle. */
async function hashFile(file: FileHandle): Promise<{ digest: string; size: number }> {
  const hash = createHash("sha256");
  const buffer = Buffer.alloc(1024 * 1024);
  let size = 0;
  for (;;) {
    const { bytesRead } = await file.read(buffer, 0, buffer.length, size);
    if (bytesRead === 0) break;
    hash.update(buffer.subarray(0, bytesRead));
    size += bytesRead;
  }
  return { digest: `sha256:${hash.digest("hex")}`, size };
}

/**
 * The put messages from `from` to `size`: the first names the upload and offset, the rest carry
 * data only.
 */
async function* chunks(
  file: FileHandle,
  head: UploadHead,
  from: number,
  size: number,
  chunkBytes: number,
): AsyncGenerator<PutMessage> {
  let position = from;
  do {
    const length = Math.min(chunkBytes, size - position);
    const data = Buffer.alloc(length);
    const { bytesRead } =
      length > 0 ? await file.read(data, 0, length, position) : { bytesRead: 0 };
    if (bytesRead < length)
      throw new Error(`the file shrank while it was uploaded (short read at ${position})`);
    yield position === from ? { ...head, offset: BigInt(from), data } : { data };
    position += length;
  } while (position < size);
}

async function* once(message: PutMessage): AsyncGenerator<PutMessage> {
  yield message;
}

async function retrying<T>(
  options: UploadOutputOptions,
  what: string,
  call: () => Promise<T>,
): Promise<T> {
  const attempts = options.attempts ?? 6;
  for (let attempt = 1; ; attempt++) {
    try {
      return await call();
    } catch (err) {
      if (err instanceof OverCap) throw err;
      if (attempt >= attempts || !retryable(options, err))
        throw new Error(`${what} failed: ${(err as Error).message}`);
      await pause(options, attempt);
    }
  }
}

/**
 * Transport failures and transient refusals (another put still running) are worth a retry; rule
 * refusals are not.
 */
/** A file the control plane refuses for its size: skipped, not a failed upload. */
class OverCap extends Error {}

function retryable(options: UploadOutputOptions, err: unknown): boolean {
  if (options.signal?.aborted) return false;
  if (err instanceof OverCap) return false;
  if (!(err instanceof ConnectError)) return true;
  return [
    Code.Unavailable,
    Code.Unknown,
    Code.Internal,
    Code.Aborted,
    Code.Canceled,
    Code.DeadlineExceeded,
  ].includes(err.code);
}

function pause(options: UploadOutputOptions, attempt: number): Promise<void> {
  const ms = (options.retryDelayMs ?? 200) * 2 ** (attempt - 1);
  return new Promise((resolve) => setTimeout(resolve, ms));
}

const mediaTypes: Readonly<Record<string, string>> = {
  ".txt": "text/plain",
  ".log": "text/plain",
  ".json": "application/json",
  ".xml": "application/xml",
  ".html": "text/html",
  ".csv": "text/csv",
  ".tar": "application/x-tar",
  ".gz": "application/gzip",
  ".zip": "application/zip",
};

function mediaTypeOf(name: string): string {
  return mediaTypes[extname(name).toLowerCase()] ?? "application/octet-stream";
}
