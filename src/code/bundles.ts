import { createReadStream } from "node:fs";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { join } from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import { GitError, gitTimeouts, gitToFile, OutputTooLarge, runGit } from "./git.js";

/** The default cap of one bundle, either way: 256 MiB. */
export const defaultMaxBundleBytes = 256 * 1024 * 1024;

/**
 * Chunk size of a streamed bundle: small enough for any Connect reader, large enough to be cheap.
 */
const bundleChunkBytes = 512 * 1024;

/** A bundle written to a private temporary file. */
export interface BundleFile {
  readonly path: string;
  readonly bytes: number;
  /** Removes the file; safe to call twice. */
  dispose(): Promise<void>;
}

/** What one bundle holds. */
export interface BundleSpec {
  /** The mirror it is made from. */
  readonly mirror: string;
  /**
   * The ref the bundle carries, set to `commit` in the mirror first, e.g.
   * refs/forelead/jobs/<id>/base.
   */
  readonly ref: string;
  readonly commit: string;
  /**
   * When given, the bundle is thin on top of it (it becomes a prerequisite), unless `commit` is
   * already in its history.
   */
  readonly base?: string;
  readonly maxBytes: number;
  /** Where temporary files go. */
  readonly scratchDir: string;
}

/**
 * Writes a bundle of exactly `commit` (as `ref`) to a temporary file, whole
 * or thin on top of `base`. Past `maxBytes` git is stopped and the request
 * refused (resource_exhausted, 413 on REST): a bundle is never truncated.
 */
export async function createBundleFile(spec: BundleSpec): Promise<BundleFile> {
  await runGit(["update-ref", spec.ref, spec.commit], {
    cwd: spec.mirror,
    timeoutMs: gitTimeouts.local,
  });
  // An empty range (commit already in base's history) would be refused by git: send the whole
  // history then.
  const thin =
    spec.base !== undefined &&
    spec.base !== spec.commit &&
    !(await isAncestor(spec.mirror, spec.commit, spec.base));
  await mkdir(spec.scratchDir, { recursive: true, mode: 0o700 });
  const dir = await mkdtemp(join(spec.scratchDir, "bundle-"));
  const dispose = () => rm(dir, { recursive: true, force: true });
  const path = join(dir, "out.bundle");
  try {
    const bytes = await gitToFile(
      ["bundle", "create", "--quiet", "-", spec.ref, ...(thin ? [`^${spec.base}`] : [])],
      path,
      spec.maxBytes,
      { cwd: spec.mirror, timeoutMs: gitTimeouts.bulk },
    );
    return { path, bytes, dispose };
  } catch (err) {
    await dispose();
    if (err instanceof OutputTooLarge) {
      throw new ConnectError(
        `the bundle of ${spec.commit} is larger than the ` +
          `${describeBytes(spec.maxBytes)} cap on bundles; it was not sent`,
        Code.ResourceExhausted,
      );
    }
    if (err instanceof GitError && err.timedOut) {
      throw new ConnectError(
        `building the bundle of ${spec.commit} did not finish within ${gitTimeouts.bulk / 1000} s; try again later`,
        Code.Unavailable,
      );
    }
    throw err;
  }
}

/** The bundle's bytes in chunks; the file is removed when the stream ends or is abandoned. */
export async function* bundleChunks(file: BundleFile): AsyncGenerator<Uint8Array> {
  try {
    for await (const chunk of createReadStream(file.path, { highWaterMark: bundleChunkBytes }))
      yield chunk as Buffer;
  } finally {
    await file.dispose();
  }
}

/** Whether `ancestor` is in the history of `descendant` (equal counts). */
export async function isAncestor(
  cwd: string,
  ancestor: string,
  descendant: string,
): Promise<boolean> {
  const { exitCode } = await runGit(["merge-base", "--is-ancestor", ancestor, descendant], {
    cwd,
    okExitCodes: [1],
    timeoutMs: gitTimeouts.local,
  });
  return exitCode === 0;
}

/** "256 MiB", "300 KiB", "12 bytes". */
function describeBytes(n: number): string {
  if (n >= 1024 * 1024 && n % (1024 * 1024) === 0) return `${n / (1024 * 1024)} MiB`;
  if (n >= 1024 && n % 1024 === 0) return `${n / 1024} KiB`;
  return `${n} bytes`;
}
