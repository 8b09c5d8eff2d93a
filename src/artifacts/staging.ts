import { createHash } from "node:crypto";
import { constants as fsConstants } from "node:fs";
import { mkdir, open, stat, unlink, type FileHandle } from "node:fs/promises";
import { join } from "node:path";

/**
 * Partial uploads: one file per upload in a staging directory beside the
 * blobs (same filesystem, so finalize moves a file into the store with a
 * rename). A staging file is never read by anyone but the upload code; its
 * durable length is what the uploads table says, not what the file holds.
 */
export interface Staging {
  readonly dir: string;
  pathOf(uploadId: string): string;
  /** Opens (creating when absent) the upload's file for reading and writing at positions. */
  openFile(uploadId: string): Promise<FileHandle>;
  /** The file's length, or undefined when there is no file. */
  lengthOf(uploadId: string): Promise<number | undefined>;
  /** Removes the upload's file; a missing file is fine. */
  remove(uploadId: string): Promise<void>;
}

/** The staging area in `dir` (created when absent). */
export async function createStaging(dir: string): Promise<Staging> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const pathOf = (uploadId: string) => join(dir, `${uploadId}.part`);
  return {
    dir,
    pathOf,
    openFile: (uploadId) => open(pathOf(uploadId), fsConstants.O_RDWR | fsConstants.O_CREAT | fsConstants.O_NOFOLLOW, 0o600),
    async lengthOf(uploadId) {
      try {
        return (await stat(pathOf(uploadId))).size;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
        throw err;
      }
    },
    async remove(uploadId) {
      try {
        await unlink(pathOf(uploadId));
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
      }
    },
  };
}

/** Whether the `bytes.length` bytes at `position` of `file` equal `bytes`. */
export async function sameBytesAt(file: FileHandle, position: number, bytes: Uint8Array): Promise<boolean> {
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
export async function writeAllAt(file: FileHandle, position: number, bytes: Uint8Array): Promise<void> {
  let written = 0;
  while (written < bytes.length) {
    const { bytesWritten } = await file.write(bytes, written, bytes.length - written, position + written);
    written += bytesWritten;
  }
}

/** "sha256:<hex>" of the first `length` bytes of `file`, read in 1 MiB pieces. */
export async function sha256Of(file: FileHandle, length: number): Promise<string> {
  const hash = createHash("sha256");
  const buffer = Buffer.alloc(Math.min(1024 * 1024, Math.max(length, 1)));
  let position = 0;
  while (position < length) {
    const { bytesRead } = await file.read(buffer, 0, Math.min(buffer.length, length - position), position);
    if (bytesRead === 0) break;
    hash.update(buffer.subarray(0, bytesRead));
    position += bytesRead;
  }
  return `sha256:${hash.digest("hex")}`;
}
