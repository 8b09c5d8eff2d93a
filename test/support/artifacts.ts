import { createHash } from "node:crypto";
import { chmod, mkdtemp, readdir, readFile, rm, stat, utimes, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { sql } from "kysely";
import { afterAll } from "vitest";
import type { ArtifactStore } from "../../src/artifacts/store.js";
import type { ControlPlane } from "../../src/server/control-plane.js";
import type { LeasedJob } from "./actors.js";
import type { RestReply } from "./clients.js";
import type { TestControlPlaneOptions } from "./control-plane.js";
import { databaseKind } from "./database.js";

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
export function restUploads(job: Pick<LeasedJob, "runner" | "jobId" | "token">): RestUploads {
  const lease = { apiVersion: "v1", jobId: job.jobId, leaseToken: job.token };
  const headers = (offset: number) => ({
    "content-type": "application/octet-stream",
    "forelead-api-version": "v1",
    "forelead-job-id": job.jobId,
    "forelead-lease-token": job.token,
    "forelead-upload-offset": String(offset),
  });
  return {
    open: (name, size, digest, mediaType = "") =>
      job.runner.rest.request("POST", "/v1/runner/uploads", {
        ...lease,
        name,
        size: String(size),
        digest,
        mediaType,
      }),
    put: (uploadId, offset, bytes) =>
      job.runner.rest.request(
        "PUT",
        `/v1/runner/uploads/${uploadId}`,
        bytes ? Buffer.from(bytes) : undefined,
        headers(offset),
      ),
    finalize: (uploadId) =>
      job.runner.rest.request("POST", `/v1/runner/uploads/${uploadId}/finalize`, lease),
    headers,
  };
}

/** Every file under `dir`, as paths relative to it (none when it does not exist). */
async function filesUnder(dir: string): Promise<string[]> {
  try {
    const entries = await readdir(dir, { recursive: true, withFileTypes: true });
    return entries
      .filter((e) => e.isFile())
      .map((e) => join(e.parentPath, e.name).slice(dir.length + 1))
      .sort();
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

/**
 * The artifact stores the upload suites run on: files always, Postgres rows too when the suite runs
 * on Postgres.
 */
export const artifactStoreKinds: ReadonlyArray<ArtifactStore["kind"]> =
  databaseKind === "postgres" ? ["files", "postgres"] : ["files"];

/**
 * Control-plane options that put artifacts in a store of `kind`: files in a
 * directory made in beforeAll (removed in afterAll, after the plane closed
 * when this is called before useControlPlane), or Postgres rows (the default
 * on a postgres:// database). Pass the result to useControlPlane.
 */
export function artifactStoreOptions(
  kind: ArtifactStore["kind"],
): () => Promise<TestControlPlaneOptions> {
  if (kind === "postgres" && databaseKind !== "postgres")
    throw new Error("the Postgres artifact store needs DATABASE_URL");
  let dir: string | undefined;
  afterAll(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });
  return async () =>
    kind === "files"
      ? { artifactsDir: (dir = await mkdtemp(join(tmpdir(), "forelead-artifacts-"))) }
      : {};
}

/** What a test reads of an artifact store, whichever kind it is. */
export interface StoredArtifacts {
  readonly kind: ArtifactStore["kind"];
  /** The digests of the blobs stored, sorted. */
  blobs(): Promise<string[]>;
  /** The upload ids with staged bytes, sorted. */
  staged(): Promise<string[]>;
  /** How many bytes of the upload are staged (0 when none). */
  stagedBytes(uploadId: string): Promise<number>;
  /**
   * Something that changes when the blob's bytes are stored again: its inode, or the transaction
   * that wrote its chunk rows and their count (a deduplicated upload only moves its stored time).
   */
  blobIdentity(digest: string): Promise<string>;
  /** Flips one bit of the stored blob at `at`, behind the store's back. */
  damage(digest: string, at: number): Promise<void>;
  /** Moves the time the blob was stored `ms` into the past, behind the store's back. */
  age(digest: string, ms: number): Promise<void>;
}

/** A view of `plane`'s artifact store for assertions. */
export function storedArtifacts(plane: ControlPlane): StoredArtifacts {
  const store = plane.artifacts.store;
  const db = plane.store.db;
  if (store.kind === "files") {
    const blobs = join(store.dir, "blobs");
    const staging = join(store.dir, "staging");
    return {
      kind: store.kind,
      blobs: async () => (await filesUnder(blobs)).map((f) => `sha256:${basename(f)}`).sort(),
      staged: async () => (await filesUnder(staging)).map((f) => f.replace(/\.part$/, "")).sort(),
      stagedBytes: async (uploadId) =>
        (await stat(join(staging, `${uploadId}.part`)).catch(() => undefined))?.size ?? 0,
      blobIdentity: async (digest) => String((await stat(join(blobs, blobPath(digest)))).ino),
      async age(digest, ms) {
        const then = new Date(Date.now() - ms);
        await utimes(join(blobs, blobPath(digest)), then, then);
      },
      async damage(digest, at) {
        const file = join(blobs, blobPath(digest));
        await chmod(file, 0o644);
        const bytes = await readFile(file);
        bytes[at] = bytes[at]! ^ 1;
        await writeFile(file, bytes);
      },
    };
  }
  return {
    kind: store.kind,
    blobs: async () =>
      (await db.selectFrom("artifact_blobs").select("digest").orderBy("digest").execute()).map(
        (r) => r.digest,
      ),
    staged: async () =>
      (
        await db
          .selectFrom("upload_chunks")
          .select("upload_id")
          .distinct()
          .orderBy("upload_id")
          .execute()
      ).map((r) => r.upload_id),
    async stagedBytes(uploadId) {
      const { rows } = await sql<{
        n: number | null;
      }>`select sum(length(data))::int as n from upload_chunks where upload_id = ${uploadId}`.execute(
        db,
      );
      return Number(rows[0]?.n ?? 0);
    },
    async age(digest, ms) {
      await sql`update artifact_blobs set created_at = created_at - make_interval(secs => ${ms / 1000})
        where digest = ${digest}`.execute(db);
    },
    async blobIdentity(digest) {
      const { rows } = await sql<{
        id: string;
      }>`select min(c.xmin::text) || '/' || count(*) as id from artifact_blob_chunks c
        where c.digest = ${digest}`.execute(db);
      return rows[0]!.id;
    },
    async damage(digest, at) {
      await sql`update artifact_blob_chunks set data = set_byte(data, (${at}::bigint -
        byte_offset)::int, get_byte(data, (${at}::bigint - byte_offset)::int) # 1)
        where digest = ${digest} and byte_offset <= ${at}::bigint and byte_offset + length(data)
          > ${at}::bigint`.execute(db);
    },
  };
}
