import type { Digest } from "./names.js";

/** A blob being read: its size and its bytes. */
interface BlobReader {
  readonly size: number;
  readonly chunks: AsyncIterable<Uint8Array>;
}

/** A stored blob as the garbage collector sees it. */
export interface StoredBlob {
  readonly digest: Digest;
  readonly size: number;
  /** When it was stored (a deduplicated upload of the same bytes stores it again: now). */
  readonly storedAt: Date;
}

/**
 * The content-addressed store of artifacts. Blobs are immutable and named
 * only by their digest; a blob gets there only from a staged upload whose
 * bytes were verified to have that digest (StagingStore.promote).
 */
export interface BlobStore {
  has(digest: Digest): Promise<boolean>;
  /** The blob's size, or undefined when it is not stored. */
  size(digest: Digest): Promise<number | undefined>;
  /** Reads a blob in pieces of at most `chunkBytes`; not_found when it is not stored. */
  open(digest: Digest, chunkBytes?: number): Promise<BlobReader>;
  /** Every blob, in digest order, read as it goes (src/artifacts/gc.ts). */
  list(): AsyncIterable<StoredBlob>;
  /** Deletes a blob; one already gone is fine. Only the garbage collector calls it. */
  remove(digest: Digest): Promise<void>;
}

/**
 * An upload's staged bytes, open for one put. Bytes written are durable only
 * once sync() returned: the uploads row's durable size may claim them then,
 * and never before.
 */
export interface StagedWriter {
  /** Whether the `bytes.length` bytes held at `position` equal `bytes` (a replayed range). */
  matches(position: number, bytes: Uint8Array): Promise<boolean>;
  /** Writes `bytes` at `position`; a put writes in order, from the durable size on. */
  write(position: number, bytes: Uint8Array): Promise<void>;
  /** Makes every byte written so far durable. */
  sync(): Promise<void>;
  /** Ends the put; bytes written since the last sync may be lost. */
  close(): Promise<void>;
}

/**
 * Partial uploads, one per upload id. Nobody but the upload code reads them;
 * the durable length is what the uploads table says, not what is staged
 * (a crash or a broken put may leave bytes past it).
 */
export interface StagingStore {
  open(uploadId: string): Promise<StagedWriter>;
  /**
   * How many bytes are staged, or undefined when nothing is (never written, removed or promoted).
   */
  lengthOf(uploadId: string): Promise<number | undefined>;
  /** Drops staged bytes past `length`, makes the rest durable and returns their "sha256:<hex>". */
  seal(uploadId: string, length: number): Promise<string>;
  /**
   * Moves a sealed upload into the blob store under `digest`, atomically,
   * consuming it. When the blob is already stored the staged bytes are
   * removed instead (deduplication) and `created` is false.
   */
  promote(uploadId: string, digest: Digest): Promise<{ readonly created: boolean }>;
  /** Removes the upload's staged bytes; none staged is fine. */
  remove(uploadId: string): Promise<void>;
}

/**
 * Where staged uploads and blobs live: one of two implementations, chosen in src/server/domain.ts.
 */
export type ArtifactStore =
  /** fs-store.ts: files under `dir` (blobs/ and staging/); replicas must share the directory. */
  | (ArtifactStoreParts & { readonly kind: "files"; readonly dir: string })
  /** pg-store.ts: chunked rows in the shared Postgres, so any replica serves any request. */
  | (ArtifactStoreParts & { readonly kind: "postgres" });

/** What every artifact store has. */
interface ArtifactStoreParts {
  /** Where artifacts live, safe to log. */
  readonly description: string;
  readonly blobs: BlobStore;
  readonly staging: StagingStore;
}
