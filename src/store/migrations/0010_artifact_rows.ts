import { sql, type Kysely } from "kysely";

/**
 * The Postgres artifact store (src/artifacts/pg-store.ts), used with a
 * postgres:// database and no --artifacts-dir, so every replica reads and
 * writes the same blobs and staged uploads. Bytes are chunked rows of at
 * most 1 MiB (a bytea value is TOASTed out of line; one row is one round
 * trip of bounded memory), keyed by their byte offset. Storage EXTERNAL: out
 * of line and uncompressed, since artifacts are mostly compressed already and
 * compressing them again costs CPU on every put for nothing.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable("artifact_blobs")
    .addColumn("digest", "text", (c) => c.primaryKey())
    .addColumn("size", "bigint", (c) => c.notNull().check(sql`size >= 0`))
    .addColumn("created_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  // A blob's bytes, and an upload's staged bytes (durable only as far as uploads.durable_size says).
  for (const [table, key, type, references] of [
    ["artifact_blob_chunks", "digest", "text", "artifact_blobs.digest"],
    ["upload_chunks", "upload_id", "uuid", "uploads.id"],
  ] as const) {
    await db.schema
      .createTable(table)
      .addColumn(key, type, (c) => c.notNull().references(references))
      .addColumn("byte_offset", "bigint", (c) => c.notNull().check(sql`byte_offset >= 0`))
      .addColumn("data", "bytea", (c) => c.notNull())
      .addPrimaryKeyConstraint(`${table}_pkey`, [key, "byte_offset"])
      .execute();
    await sql`alter table ${sql.table(table)} alter column data set storage external`.execute(db);
  }
}
