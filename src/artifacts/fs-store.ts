import { createHash, randomBytes } from "node:crypto";
import { constants as fsConstants, createReadStream } from "node:fs";
import {
  chmod,
  copyFile,
  mkdir,
  open,
  readdir,
  rename,
  stat,
  unlink,
  utimes,
  type FileHandle,
} from "node:fs/promises";
import { dirname, join } from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import { digestHex, type Digest } from "./names.js";
import type { ArtifactStore, BlobStore, StagingStore, StoredBlob } from "./store.js";
import { fsyncPath } from "../store/fsync-path.js";

/**
 * The filesystem store in `dir`:
 *
 * ```
 * blobs/sha256/<first two hex>/<hex>   one read-only file per digest
 * staging/<uploadId>.part              partial uploads
 * ```
 *
 * Staging and blobs share a filesystem, so a promote is a rename. A blob
 * appears atomically: the file is fsynced, renamed into place (a temporary
 * copy in the same directory first when it lives on another filesystem) and
 * the directory is fsynced, so a crash leaves either no blob or the whole one.
 * Two replicas storing the same digest at once both rename identical bytes
 * over each other, which is harmless.
 */
export async function createFileArtifactStore(dir: string): Promise<ArtifactStore> {
  const blobRoot = join(dir, "blobs");
  const stagingDir = join(dir, "staging");
  await mkdir(stagingDir, { recursive: true, mode: 0o700 });
  const blobPath = (digest: Digest) => {
    const hex = digestHex(digest);
    return join(blobRoot, "sha256", hex.slice(0, 2), hex);
  };
  const stagedPath = (uploadId: string) => join(stagingDir, `${uploadId}.part`);
  const openStaged = (uploadId: string) =>
    open(
      stagedPath(uploadId),
      fsConstants.O_RDWR | fsConstants.O_CREAT | fsConstants.O_NOFOLLOW,
      0o600,
    );
  const blobSize = (digest: Digest) => sizeOf(blobPath(digest));

  const blobs: BlobStore = {
    has: async (digest) => (await blobSize(digest)) !== undefined,
    size: blobSize,
    async open(digest, chunkBytes = 256 * 1024) {
      const size = await blobSize(digest);
      if (size === undefined)
        throw new ConnectError(
          `blob ${digest} is not in the artifact store (${blobRoot}); it was removed outside forelead`,
          Code.NotFound,
        );
      return { size, chunks: createReadStream(blobPath(digest), { highWaterMark: chunkBytes }) };
    },
    list: () => listBlobs(join(blobRoot, "sha256")),
    async remove(digest) {
      try {
        await unlink(blobPath(digest));
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
      }
    },
  };

  const staging: StagingStore = {
    async open(uploadId) {
      const file = await openStaged(uploadId);
      return {
        matches: (position, bytes) => sameBytesAt(file, position, bytes),
        write: (position, bytes) => writeAllAt(file, position, bytes),
        sync: () => file.sync(),
        close: () => file.close(),
      };
    },
    lengthOf: (uploadId) => sizeOf(stagedPath(uploadId)),
    async seal(uploadId, length) {
      const file = await openStaged(uploadId);
      try {
        await file.truncate(length);
        await file.sync();
        return await sha256Of(file, length);
      } finally {
        await file.close();
      }
    },
    async promote(uploadId, digest) {
      const file = stagedPath(uploadId);
      const target = blobPath(digest);
      if ((await blobSize(digest)) !== undefined) {
        // Stored again now: the garbage collector's grace period starts over.
        const now = new Date();
        await utimes(target, now, now);
        await unlink(file);
        return { created: false };
      }
      await mkdir(dirname(target), { recursive: true });
      await fsyncPath(file);
      await chmod(file, 0o444);
      try {
        await rename(file, target);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== "EXDEV") throw err;
        const temp = join(dirname(target), `.tmp-${randomBytes(8).toString("hex")}`);
        await copyFile(file, temp);
        await fsyncPath(temp);
        await rename(temp, target);
        await unlink(file);
      }
      await fsyncPath(dirname(target));
      return { created: true };
    },
    async remove(uploadId) {
      try {
        await unlink(stagedPath(uploadId));
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
      }
    },
  };
  return { kind: "files", dir, description: `files in ${dir}`, blobs, staging };
}

/** The blobs under `root` (sha256/), in digest order, one directory read at a time. */
async function* listBlobs(root: string): AsyncGenerator<StoredBlob> {
  const dirs = await readdirIfAny(root);
  for (const prefix of dirs.sort()) {
    for (const hex of (await readdirIfAny(join(root, prefix))).sort()) {
      if (!/^[0-9a-f]{64}$/.test(hex)) continue; // a promote's temporary copy
      const s = await stat(join(root, prefix, hex)).catch(() => undefined);
      if (s) yield { digest: `sha256:${hex}`, size: s.size, storedAt: s.mtime };
    }
  }
}

async function readdirIfAny(dir: string): Promise<string[]> {
  try {
    return await readdir(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return [];
    throw err;
  }
}

async function sizeOf(path: string): Promise<number | undefined> {
  try {
    return (await stat(path)).size;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw err;
  }
}

/** Whether the `bytes.length` bytes at `position` of `file` equal `bytes`. */
async function sameBytesAt(
  file: FileHandle,
  position: number,
  bytes: Uint8Array,
): Promise<boolean> {
  const held = Buffer.alloc(bytes.length);
  let read = 0;
  while (read < held.length) {
    const { bytesRead } = await file.read(held, read, held.length - read, position + read);
    if (bytesRead === 0) return false;
    read += bytesRead;
  }
  return held.equals(bytes);
}

/** Writes all of `bytes` at `position`. */
async function writeAllAt(file: FileHandle, position: number, bytes: Uint8Array): Promise<void> {
  let written = 0;
  while (written < bytes.length) {
    const { bytesWritten } = await file.write(
      bytes,
      written,
      bytes.length - written,
      position + written,
    );
    written += bytesWritten;
  }
}

/** "sha256:<hex>" of the first `length` bytes of `file`, read in 1 MiB pieces. */
async function sha256Of(file: FileHandle, length: number): Promise<string> {
  const hash = createHash("sha256");
  const buffer = Buffer.alloc(Math.min(1024 * 1024, Math.max(length, 1)));
  let position = 0;
  while (position < length) {
    const { bytesRead } = await file.read(
      buffer,
      0,
      Math.min(buffer.length, length - position),
      position,
    );
    if (bytesRead === 0) break;
    hash.update(buffer.subarray(0, bytesRead));
    position += bytesRead;
  }
  return `sha256:${hash.digest("hex")}`;
}
