import { sql, type Kysely } from "kysely";
import type { Database } from "../store/schema.js";
import type { Digest } from "./names.js";
import type { BlobStore, StoredBlob } from "./store.js";

/** What one collection deleted. */
export interface CollectedBlobs {
  readonly blobs: number;
  readonly bytes: number;
}

/** Blobs checked against the uploads table in one query. */
const page = 500;

/**
 * Deletes the blobs stored longer than `graceMs` ago that no upload names. Every blob a kept job
 * can reach is named by an upload of it: a result manifest and a checkpoint list only digests
 * finalized under the job's own leases (src/artifacts/manifest.ts), a pipeline's inputs are the
 * manifests of its steps' jobs, and an upload in progress names its digest from its first request.
 * Upload rows go with their job (--job-retention), so a blob becomes garbage when the last job that
 * uploaded it is pruned. Staged bytes of uploads in progress are not blobs and are never touched.
 *
 * A deduplicated upload of a stored blob restarts its grace period (promote), and an upload of it
 * that began before the check names it; what is left is an upload that begins and finalizes
 * between the check and the delete of one page, which the grace period does not cover: the
 * upload's job then finds the blob gone (404) and uploads it again.
 */
export async function collectBlobs(
  db: Kysely<Database>,
  blobs: BlobStore,
  graceMs: number,
): Promise<CollectedBlobs> {
  const before = Date.now() - graceMs;
  let total = { blobs: 0, bytes: 0 };
  let candidates: StoredBlob[] = [];
  const sweep = async () => {
    const digests = candidates.map((b) => b.digest);
    const { rows } = await sql<{ digest: Digest }>`select d as digest
      from unnest(${digests}::text[]) as d
      where not exists (select 1 from uploads u where u.digest = d and u.state <> 'discarded')`.execute(
      db,
    );
    const unnamed = new Set(rows.map((r) => r.digest));
    for (const blob of candidates) {
      if (!unnamed.has(blob.digest)) continue;
      await blobs.remove(blob.digest);
      total = { blobs: total.blobs + 1, bytes: total.bytes + blob.size };
    }
    candidates = [];
  };
  for await (const blob of blobs.list()) {
    if (blob.storedAt.getTime() >= before) continue;
    candidates.push(blob);
    if (candidates.length >= page) await sweep();
  }
  if (candidates.length > 0) await sweep();
  return total;
}
