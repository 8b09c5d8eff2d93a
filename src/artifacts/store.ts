import { createReadStream } from "node:fs";
import { chmod, copyFile, mkdir, open, rename, stat, unlink } from "node:fs/promises";
import { randomBytes } from "node:crypto";
import { dirname, join } from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import { digestHex, type Digest } from "./names.js";

/** A blob being read: its size and its bytes. */
export interface BlobReader {
  readonly size: number;
  readonly chunks: AsyncIterable<Uint8Array>;
}

/**
 * The content-addressed store of artifacts. Blobs are immutable and named
 * only by their digest; whoever puts one has verified that the content has
 * that digest. A filesystem implementation is below; an S3-compatible one
 * can implement the same four operations.
 */
export interface BlobStore {
  /** Where blobs live, safe to log. */
  readonly description: string;
  /**
   * Moves a verified, fsynced local file into the store under `digest`,
   * consuming the file. When the blob is already there the file is removed
   * instead (deduplication) and `created` is false.
   */
  putFile(digest: Digest, file: string): Promise<{ readonly created: boolean }>;
  has(digest: Digest): Promise<boolean>;
  /** The blob's size, or undefined when it is not stored. */
  size(digest: Digest): Promise<number | undefined>;
  /** Reads a blob; not_found when it is not stored. */
  open(digest: Digest, chunkBytes?: number): Promise<BlobReader>;
}

/**
 * Blobs as read-only files at `<root>/sha256/<first two hex>/<hex>`. A blob
 * appears atomically: the file is fsynced, renamed into place (a temporary
 * copy in the same directory first when it lives on another filesystem) and
 * the directory is fsynced, so a crash leaves either no blob or the whole one.
 * Two replicas storing the same digest at once both rename identical bytes
 * over each other, which is harmless.
 */
export function createFileBlobStore(root: string): BlobStore {
  const pathOf = (digest: Digest) => {
    const hex = digestHex(digest);
    return join(root, "sha256", hex.slice(0, 2), hex);
  };
  const sizeOf = async (digest: Digest) => {
    try {
      return (await stat(pathOf(digest))).size;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
      throw err;
    }
  };
  return {
    description: `files in ${root}`,
    async putFile(digest, file) {
      const target = pathOf(digest);
      if ((await sizeOf(digest)) !== undefined) {
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
    async has(digest) {
      return (await sizeOf(digest)) !== undefined;
    },
    size: sizeOf,
    async open(digest, chunkBytes = 256 * 1024) {
      const size = await sizeOf(digest);
      if (size === undefined) {
        throw new ConnectError(`blob ${digest} is not in the artifact store (${root}); it was removed outside forelead`, Code.NotFound);
      }
      return { size, chunks: createReadStream(pathOf(digest), { highWaterMark: chunkBytes }) };
    },
  };
}

/** fsync of a file or directory by path: its data (or its entries) reach the disk. */
export async function fsyncPath(path: string): Promise<void> {
  const handle = await open(path, "r");
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}
