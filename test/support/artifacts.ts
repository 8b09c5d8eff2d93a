import { createHash } from "node:crypto";
import { readdir } from "node:fs/promises";
import { join } from "node:path";
import type { LeasedJob } from "./actors.js";
import type { RestReply } from "./clients.js";

/** "sha256:<hex>" of some bytes. */
export function sha256(bytes: Uint8Array | string): string {
  return `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
}

/** The upload routes over REST, under a leased job. */
export interface RestUploads {
  open(name: string, size: number, digest: string, mediaType?: string): Promise<RestReply>;
  /** PUT raw bytes at `offset` (no bytes: asks for the durable size). */
  put(uploadId: string, offset: number, bytes?: Uint8Array): Promise<RestReply>;
  finalize(uploadId: string): Promise<RestReply>;
  /** The headers a raw PUT carries. */
  headers(offset: number): Record<string, string>;
}

/** REST upload calls for `job`. */
export function restUploads(job: LeasedJob): RestUploads {
  const lease = { apiVersion: "v1", jobId: job.jobId, leaseToken: job.token };
  const headers = (offset: number) => ({
    "content-type": "application/octet-stream",
    "forelead-api-version": "v1",
    "forelead-job-id": job.jobId,
    "forelead-lease-token": job.token,
    "forelead-upload-offset": String(offset),
  });
  return {
    open: (name, size, digest, mediaType = "") => job.runner.rest.request("POST", "/v1/runner/uploads", { ...lease, name, size: String(size), digest, mediaType }),
    put: (uploadId, offset, bytes) => job.runner.rest.request("PUT", `/v1/runner/uploads/${uploadId}`, bytes ? Buffer.from(bytes) : undefined, headers(offset)),
    finalize: (uploadId) => job.runner.rest.request("POST", `/v1/runner/uploads/${uploadId}/finalize`, lease),
    headers,
  };
}

/** Every file under `dir`, as paths relative to it (none when it does not exist). */
export async function filesUnder(dir: string): Promise<string[]> {
  try {
    const entries = await readdir(dir, { recursive: true, withFileTypes: true });
    return entries.filter((e) => e.isFile()).map((e) => join(e.parentPath, e.name).slice(dir.length + 1)).sort();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return [];
    throw err;
  }
}

/** Where the filesystem store keeps the blob of `digest`, relative to the blobs directory. */
export function blobPath(digest: string): string {
  const hex = digest.slice("sha256:".length);
  return join("sha256", hex.slice(0, 2), hex);
}
