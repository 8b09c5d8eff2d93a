import { createHash } from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import { sql, type Kysely } from "kysely";
import type { Database } from "../store/schema.js";
import type { Digest } from "./names.js";
import type { ArtifactStore, BlobStore, StagingStore, StoredBlob } from "./store.js";

/** Rows of at most 1 MiB: a put holds at most this much in memory before it is a row. */
const defaultChunkBytes = 1024 * 1024;

/**
 * The Postgres store: blobs in artifact_blobs + artifact_blob_chunks, staged
 * uploads in upload_chunks, so any replica on the database
 * takes any put, finalize or download. A put's bytes become rows as each
 * chunk fills and at sync(); a committed row is durable, which is what the
 * durable size then claims. A promote copies the rows inside Postgres and
 * removes the staged ones in one transaction: a crash leaves the upload
 * staged or the blob whole, never both half.
 */
export function createPostgresArtifactStore(
  db: Kysely<Database>,
  chunkBytes = defaultChunkBytes,
): ArtifactStore {
  /**
   * Drops the upload's staged bytes from `at` on (bytes a broken or raced put left past the durable
   * size).
   */
  const cutAt = async (uploadId: string, at: number) => {
    await db
      .deleteFrom("upload_chunks")
      .where("upload_id", "=", uploadId)
      .where("byte_offset", ">=", at)
      .execute();
    await sql`update upload_chunks set data = substring(data from 1 for (${at}::bigint - byte_offset)::int)
      where upload_id = ${uploadId} and byte_offset < ${at}::bigint and byte_offset + length(data)
        > ${at}::bigint`.execute(db);
  };

  const blobs: BlobStore = {
    has: async (digest) => (await blobSize(db, digest)) !== undefined,
    size: (digest) => blobSize(db, digest),
    async open(digest, pieceBytes = 256 * 1024) {
      const size = await blobSize(db, digest);
      if (size === undefined)
        throw new ConnectError(
          `blob ${digest} is not in the artifact store (Postgres table artifact_blobs)`,
          Code.NotFound,
        );
      return {
        size,
        chunks: pieces(rowsOf(db, "artifact_blob_chunks", "digest", digest), pieceBytes),
      };
    },
    list: () => listBlobs(db),
    async remove(digest) {
      await db.transaction().execute(async (tx) => {
        await tx.deleteFrom("artifact_blob_chunks").where("digest", "=", digest).execute();
        await tx.deleteFrom("artifact_blobs").where("digest", "=", digest).execute();
      });
    },
  };

  const staging: StagingStore = {
    async open(uploadId) {
      let start = 0;
      let pending: Buffer[] = [];
      let pendingBytes = 0;
      // The first row of a put first drops what lies past it; the put's later rows follow its own.
      // (A replica racing on the same upload then collides on the key and fails its put.)
      let cut = false;
      const flush = async (upTo: number) => {
        while (pendingBytes >= upTo && pendingBytes > 0) {
          const all = Buffer.concat(pending);
          const row = all.subarray(0, Math.min(chunkBytes, all.length));
          if (!cut) await cutAt(uploadId, start);
          cut = true;
          await db
            .insertInto("upload_chunks")
            .values({ upload_id: uploadId, byte_offset: start, data: row })
            .execute();
          start += row.length;
          const rest = all.subarray(row.length);
          pending = rest.length ? [rest] : [];
          pendingBytes = rest.length;
        }
      };
      return {
        matches: (position, bytes) => stagedEquals(db, uploadId, position, bytes),
        async write(position, bytes) {
          if (pendingBytes > 0 && position !== start + pendingBytes) await flush(1);
          if (pendingBytes === 0 && position !== start) {
            start = position;
            cut = false;
          }
          pending.push(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));
          pendingBytes += bytes.length;
          await flush(chunkBytes);
        },
        sync: () => flush(1),
        async close() {
          pending = [];
          pendingBytes = 0;
        },
      };
    },
    async lengthOf(uploadId) {
      const row = await db
        .selectFrom("upload_chunks")
        .select(sql<number | null>`max(byte_offset + length(data))`.as("end"))
        .where("upload_id", "=", uploadId)
        .executeTakeFirst();
      return row?.end === null || row?.end === undefined ? undefined : Number(row.end);
    },
    async seal(uploadId, length) {
      await cutAt(uploadId, length);
      const hash = createHash("sha256");
      let expected = 0;
      for await (const row of rowsOf(db, "upload_chunks", "upload_id", uploadId)) {
        if (row.offset !== expected) break; // a hole: what follows is not the upload's bytes
        hash.update(row.data);
        expected += row.data.length;
      }
      return `sha256:${hash.digest("hex")}`;
    },
    async promote(uploadId, digest) {
      return db.transaction().execute(async (tx) => {
        // ON CONFLICT waits for a replica storing the same digest at once, then finds its blob.
        const created = await sql`insert into artifact_blobs (digest, size)
          select ${digest}, coalesce(sum(length(data)), 0) from upload_chunks where upload_id = ${uploadId}
          on conflict (digest) do nothing returning digest`.execute(tx);
        // Stored again now: the garbage collector's grace period starts over.
        if (!created.rows.length)
          await sql`update artifact_blobs set created_at = now() where digest = ${digest}`.execute(
            tx,
          );
        if (created.rows.length) {
          await sql`insert into artifact_blob_chunks (digest, byte_offset, data)
            select ${digest}, byte_offset, data from upload_chunks where upload_id = ${uploadId}`.execute(
            tx,
          );
        }
        await tx.deleteFrom("upload_chunks").where("upload_id", "=", uploadId).execute();
        return { created: created.rows.length > 0 };
      });
    },
    async remove(uploadId) {
      await db.deleteFrom("upload_chunks").where("upload_id", "=", uploadId).execute();
    },
  };
  return {
    kind: "postgres",
    description: "Postgres (tables artifact_blobs, upload_chunks)",
    blobs,
    staging,
  };
}

/** Every blob's row, in digest order, 500 rows a query. */
async function* listBlobs(db: Kysely<Database>): AsyncGenerator<StoredBlob> {
  let after = "";
  for (;;) {
    const rows = await db
      .selectFrom("artifact_blobs")
      .select(["digest", "size", "created_at"])
      .where("digest", ">", after)
      .orderBy("digest")
      .limit(500)
      .execute();
    for (const r of rows)
      yield { digest: r.digest as Digest, size: Number(r.size), storedAt: r.created_at };
    if (rows.length < 500) return;
    after = rows[rows.length - 1]!.digest;
  }
}

async function blobSize(db: Kysely<Database>, digest: Digest): Promise<number | undefined> {
  const row = await db
    .selectFrom("artifact_blobs")
    .select("size")
    .where("digest", "=", digest)
    .executeTakeFirst();
  return row ? Number(row.size) : undefined;
}

/**
 * The rows of one blob or staged upload in offset order, one query per row, so memory stays at one
 * row.
 */
async function* rowsOf(
  db: Kysely<Database>,
  table: "artifact_blob_chunks" | "upload_chunks",
  key: "digest" | "upload_id",
  id: string,
): AsyncGenerator<{ offset: number; data: Buffer }> {
  let next = 0;
  for (;;) {
    const { rows } = await sql<{
      byte_offset: number;
      data: Uint8Array;
    }>`select byte_offset, data from ${sql.table(table)}
      where ${sql.ref(key)} = ${id} and byte_offset >= ${next}::bigint order by byte_offset limit 1`.execute(
      db,
    );
    const row = rows[0];
    if (!row) return;
    const data = Buffer.from(row.data.buffer, row.data.byteOffset, row.data.byteLength);
    const offset = Number(row.byte_offset);
    yield { offset, data };
    next = offset + Math.max(1, data.length);
  }
}

/** The rows' bytes in pieces of at most `pieceBytes`. */
async function* pieces(
  rows: AsyncIterable<{ data: Buffer }>,
  pieceBytes: number,
): AsyncGenerator<Uint8Array> {
  for await (const { data } of rows) {
    for (let at = 0; at < data.length; at += pieceBytes) yield data.subarray(at, at + pieceBytes);
  }
}

/**
 * Whether the upload's staged bytes at `position` equal `bytes` (all of them staged, contiguously).
 */
async function stagedEquals(
  db: Kysely<Database>,
  uploadId: string,
  position: number,
  bytes: Uint8Array,
): Promise<boolean> {
  const end = position + bytes.length;
  const { rows } = await sql<{
    byte_offset: number;
    data: Uint8Array;
  }>`select byte_offset, data from upload_chunks
    where upload_id = ${uploadId} and byte_offset < ${end}::bigint and byte_offset + length(data)
      > ${position}::bigint order by byte_offset`.execute(db);
  let at = position;
  for (const row of rows) {
    const offset = Number(row.byte_offset);
    if (offset > at) return false;
    const held = row.data.subarray(at - offset, Math.min(row.data.length, end - offset));
    if (!Buffer.from(held).equals(bytes.subarray(at - position, at - position + held.length)))
      return false;
    at += held.length;
  }
  return at === end;
}
