import { createHash } from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import type { Kysely } from "kysely";
import { checkJobId } from "../broker/ids.js";
import type { LeaseHolder } from "../broker/leases/check.js";
import type { LeaseCall } from "../broker/leases/views.js";
import type { Database } from "../store/schema.js";
import { logUnlessUnreachable } from "../store/unreachable.js";
import { checkManifest, type ManifestEntryInput } from "./manifest.js";
import { checkArtifactName, type Digest } from "./names.js";
import type { ArtifactStore } from "./store.js";
import {
  finalizeUpload,
  openUpload,
  putUpload,
  sweepUploads,
  type OpenUploadInput,
  type PutUploadInput,
  type StoredArtifact,
  type UploadContext,
  type UploadProgress,
} from "./uploads.js";

/** The default cap on one artifact: 2 GiB. */
export const defaultMaxArtifactBytes = 2 * 1024 * 1024 * 1024;

/** Options of the artifacts service. */
export interface ArtifactsOptions {
  readonly db: Kysely<Database>;
  /** Where blobs and staged uploads live: files (fs-store.ts) or Postgres rows (pg-store.ts). */
  readonly store: ArtifactStore;
  /** Largest artifact accepted; 2 GiB by default. */
  readonly maxArtifactBytes?: number;
  /** How often uploads of ended leases are discarded; 30 s by default. */
  readonly sweepIntervalMs?: number;
  /** Bytes a put writes between two sync + durable-size commits; 8 MiB by default. */
  readonly commitEveryBytes?: number;
  /** How long a put or finalize waits for another one on the same upload; 10 s by default. */
  readonly lockWaitMs?: number;
}

/** An artifact of a job with its bytes. */
interface ArtifactContent extends StoredArtifact {
  readonly chunks: AsyncIterable<Uint8Array>;
}

/** Uploads under a lease, the blob store, and job result manifests. */
export interface Artifacts {
  readonly store: ArtifactStore;
  readonly maxArtifactBytes: number;
  open(input: OpenUploadInput): Promise<UploadProgress>;
  put(input: PutUploadInput, data: AsyncIterable<Uint8Array>): Promise<UploadProgress>;
  finalize(input: LeaseCall & { readonly uploadId: string }): Promise<StoredArtifact>;
  /** Checks a completion's manifest; see manifest.ts. */
  checkManifest(
    holder: LeaseHolder,
    jobId: string,
    entries: readonly ManifestEntryInput[],
  ): Promise<StoredArtifact[]>;
  /** The manifest a job's completion recorded (empty until it settles); 404 for an unknown job. */
  list(jobId: string): Promise<StoredArtifact[]>;
  /** One artifact of a job's manifest, by name, with its bytes. */
  read(jobId: string, name: string, chunkBytes?: number): Promise<ArtifactContent>;
  /**
   * The bytes of an artifact listed elsewhere (a suspended job's checkpoint), checked against its
   * digest as read.
   */
  content(artifact: StoredArtifact, chunkBytes?: number): Promise<ArtifactContent>;
  /** Discards uploads whose lease has ended now (also done on a timer). */
  sweep(): Promise<number>;
  close(): Promise<void>;
}

/** Starts the artifacts service on `options.store`. */
export function createArtifacts(options: ArtifactsOptions): Artifacts {
  const { db, store } = options;
  const { blobs, staging } = store;
  const maxArtifactBytes = options.maxArtifactBytes ?? defaultMaxArtifactBytes;
  const ctx: UploadContext = {
    db,
    blobs,
    staging,
    maxArtifactBytes,
    commitEveryBytes: options.commitEveryBytes ?? 8 * 1024 * 1024,
    maxOpenPerLease: 64,
    lock: createKeyedLock(options.lockWaitMs ?? 10_000),
  };
  let sweeping: Promise<unknown> = Promise.resolve();
  const timer = setInterval(() => {
    sweeping = sweepUploads(ctx).catch((err) =>
      logUnlessUnreachable("artifacts: upload sweep failed", err),
    );
  }, options.sweepIntervalMs ?? 30_000);
  timer.unref();

  const list = async (jobIdInput: string): Promise<StoredArtifact[]> => {
    const jobId = checkJobId(jobIdInput);
    const row = await db
      .selectFrom("jobs")
      .select(["artifacts"])
      .where("id", "=", jobId)
      .executeTakeFirst();
    if (!row) throw new ConnectError(`job ${jobId} not found`, Code.NotFound);
    return (row.artifacts ?? []).map((a) => ({
      name: String(a.name),
      digest: String(a.digest) as Digest,
      size: Number(a.size),
      mediaType: String(a.mediaType),
    }));
  };
  const content = async (
    artifact: StoredArtifact,
    chunkBytes?: number,
  ): Promise<ArtifactContent> => {
    const blob = await blobs.open(artifact.digest, chunkBytes);
    return { ...artifact, chunks: verified(artifact, blob.chunks) };
  };
  return {
    store,
    maxArtifactBytes,
    open: (input) => openUpload(ctx, input),
    put: (input, data) => putUpload(ctx, input, data),
    finalize: (input) => finalizeUpload(ctx, input),
    checkManifest: (holder, jobId, entries) => checkManifest(db, holder, jobId, entries),
    list,
    async read(jobId, name, chunkBytes) {
      checkArtifactName(name);
      const artifact = (await list(jobId)).find((a) => a.name === name);
      if (!artifact)
        throw new ConnectError(
          `job ${jobId} has no artifact named ${JSON.stringify(name)}; its completion lists the ones it has`,
          Code.NotFound,
        );
      return content(artifact, chunkBytes);
    },
    content,
    sweep: () => sweepUploads(ctx),
    async close() {
      clearInterval(timer);
      await sweeping;
    },
  };
}

/**
 * The blob's bytes, hashed as they pass: a blob changed in the store ends the
 * stream with data_loss instead of completing, so a reader never takes
 * damaged bytes for the artifact (on REST the stream is reset).
 */
async function* verified(
  artifact: StoredArtifact,
  chunks: AsyncIterable<Uint8Array>,
): AsyncGenerator<Uint8Array> {
  const hash = createHash("sha256");
  let size = 0;
  for await (const chunk of chunks) {
    hash.update(chunk);
    size += chunk.length;
    yield chunk;
  }
  const digest = `sha256:${hash.digest("hex")}`;
  if (digest !== artifact.digest || size !== artifact.size) {
    console.error(
      `artifacts: blob ${artifact.digest} (${JSON.stringify(artifact.name)}) ` +
        `read back as ${size} bytes hashing to ${digest}; the store is damaged`,
    );
    throw new ConnectError(
      `the stored blob of ${JSON.stringify(artifact.name)} no longer matches ` +
        `${artifact.digest} (read ${size} bytes hashing to ${digest}); the ` +
        `artifact store was damaged`,
      Code.DataLoss,
    );
  }
}

/**
 * Runs one function at a time per key in this process. A caller waits for
 * the one before it up to `waitMs` (a retry often arrives while the request
 * it replaces is still being torn down), then is refused. Replicas do not
 * share this lock: the durable-size update is a compare-and-set, and
 * finalize hashes what is staged, so a race across replicas can fail a put
 * but never store wrong bytes.
 */
function createKeyedLock(waitMs: number): UploadContext["lock"] {
  const tails = new Map<string, Promise<void>>();
  return async (key, fn) => {
    const before = tails.get(key) ?? Promise.resolve();
    let release!: () => void;
    const mine = new Promise<void>((resolve) => (release = resolve));
    const tail = before.then(() => mine);
    tails.set(key, tail);
    let timer: NodeJS.Timeout | undefined;
    try {
      const waited = await Promise.race([
        before.then(() => true),
        new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), waitMs))),
      ]);
      if (!waited)
        throw new ConnectError(
          `another put or finalize of upload ${key} is still running; retry when it ends`,
          Code.Aborted,
        );
      return await fn();
    } finally {
      clearTimeout(timer);
      release();
      if (tails.get(key) === tail) tails.delete(key);
    }
  };
}
