import { createReadStream } from "node:fs";
import { mkdir, open, stat } from "node:fs/promises";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fsyncPath } from "../store/fsync-path.js";

/**
 * An append-only file of audit rows the database could not take, one JSON
 * object per line, oldest first. Every append is fsynced before it returns,
 * so a row in the spool survives a crash; rows are taken out from the front,
 * in order, once they are stored, and the file is emptied when the last one
 * is. A torn last line (a crash during an append) is cut off when the spool
 * opens: its append never returned, so its rows are still in memory or lost
 * with the process, never half in the spool.
 */
export interface AuditSpool<T> {
  readonly path: string;
  /** Rows in the spool not yet taken out. */
  readonly records: number;
  /** Bytes of those rows. */
  readonly bytes: number;
  /** The time of the oldest row not yet taken out. */
  readonly oldest: Date | undefined;
  /** Appends rows after every row already there, fsynced; throws when they cannot be written whole. Reads `rows` only before its first await. */
  append(rows: readonly T[]): Promise<void>;
  /** The oldest rows not yet taken out, at most `max`. */
  peek(max: number): Promise<readonly T[]>;
  /** Takes out the first `count` rows that peek returned (they are stored). */
  take(count: number): Promise<void>;
}

/** What opening a spool needs. */
export interface AuditSpoolOptions<T> {
  readonly dir: string;
  /** The file may grow to this many bytes; an append past it throws (the caller then fails closed). */
  readonly maxBytes: number;
  readonly timeOf: (row: T) => Date;
}

/** The spool file's name in its directory. */
export const auditSpoolFile = "audit-spool.ndjson";

const readChunkBytes = 1024 * 1024;

/** Opens (creating the directory) the spool in `dir`, counting what an earlier run left in it. */
export async function openAuditSpool<T>(options: AuditSpoolOptions<T>): Promise<AuditSpool<T>> {
  const { dir, maxBytes, timeOf } = options;
  const path = join(dir, auditSpoolFile);
  await mkdir(dir, { recursive: true });
  // size: the file's length; offset: the bytes already taken out. Both move only here, under the caller's one-at-a-time use.
  let { size, records, oldest } = await scan(path, timeOf);
  let offset = 0;
  let peeked: { rows: T[]; lengths: number[] } = { rows: [], lengths: [] };
  const peek = async (max: number): Promise<readonly T[]> => {
    if (peeked.rows.length < Math.min(max, records))
      peeked = await readLines(path, offset, size, max);
    return peeked.rows.slice(0, max);
  };

  return {
    path,
    get records() {
      return records;
    },
    get bytes() {
      return size - offset;
    },
    get oldest() {
      return oldest;
    },
    async append(rows) {
      const count = rows.length;
      if (count === 0) return;
      const first = timeOf(rows[0]!);
      const data = Buffer.from(rows.map((r) => `${JSON.stringify(r)}\n`).join(""));
      if (size + data.length > maxBytes)
        throw new Error(`the spool is full (${size} bytes; --audit-spool-max-size is ${maxBytes})`);
      await mkdir(dir, { recursive: true });
      const created = size === 0;
      const file = await open(path, "a");
      try {
        // A write to a nearly full disk may take only part of the buffer without an error.
        for (let written = 0; written < data.length;)
          written += (await file.write(data, written, data.length - written)).bytesWritten;
        await file.sync();
      } catch (err) {
        // A partial write would leave a torn line in front of the next append: cut the file back.
        await file.truncate(size).catch(() => {});
        throw err;
      } finally {
        await file.close();
      }
      if (created) await fsyncPath(dir);
      size += data.length;
      if (records === 0) oldest = first;
      records += count;
    },
    peek,
    async take(count) {
      if (count > peeked.rows.length)
        throw new Error(`audit spool: take(${count}) after a peek of ${peeked.rows.length}`);
      offset += peeked.lengths.slice(0, count).reduce((a, b) => a + b, 0);
      records -= count;
      peeked = { rows: peeked.rows.slice(count), lengths: peeked.lengths.slice(count) };
      if (records > 0) {
        oldest = timeOf((await peek(1))[0]!);
        return;
      }
      // Everything is stored: empty the file, so it never grows past one outage's records.
      const file = await open(path, "r+");
      try {
        await file.truncate(0);
        await file.sync();
      } finally {
        await file.close();
      }
      size = offset = 0;
      oldest = undefined;
      peeked = { rows: [], lengths: [] };
    },
  };
}

/** Counts the complete lines an earlier run left, cutting off a torn last one. */
async function scan<T>(
  path: string,
  timeOf: (row: T) => Date,
): Promise<{ size: number; records: number; oldest: Date | undefined }> {
  const size = await stat(path).then(
    (s) => s.size,
    (err: NodeJS.ErrnoException) => {
      if (err.code === "ENOENT") return 0;
      throw err;
    },
  );
  if (size === 0) return { size, records: 0, oldest: undefined };
  let records = 0;
  let complete = 0;
  let oldest: Date | undefined;
  const lines = createInterface({ input: createReadStream(path), crlfDelay: Infinity });
  for await (const line of lines) {
    const end = complete + Buffer.byteLength(line) + 1;
    if (end > size) break; // the last line has no newline: torn
    if (records === 0) oldest = timeOf(JSON.parse(line) as T);
    records++;
    complete = end;
  }
  if (complete < size) {
    console.error(
      `audit: the spool ${path} ends in a torn line (${size - complete} bytes, from a crash during an append); cutting it off`,
    );
    const file = await open(path, "r+");
    try {
      await file.truncate(complete);
      await file.sync();
    } finally {
      await file.close();
    }
  }
  return { size: complete, records, oldest };
}

/** Up to `max` whole lines from `offset`, parsed, with their byte lengths (newline included). */
async function readLines<T>(
  path: string,
  offset: number,
  size: number,
  max: number,
): Promise<{ rows: T[]; lengths: number[] }> {
  const rows: T[] = [];
  const lengths: number[] = [];
  const file = await open(path, "r");
  try {
    let at = offset;
    let carry = Buffer.alloc(0);
    while (rows.length < max && at < size) {
      const chunk = Buffer.alloc(Math.min(readChunkBytes, size - at));
      const { bytesRead } = await file.read(chunk, 0, chunk.length, at);
      if (bytesRead === 0) break;
      at += bytesRead;
      let text = Buffer.concat([carry, chunk.subarray(0, bytesRead)]);
      let newline: number;
      while (rows.length < max && (newline = text.indexOf(10)) >= 0) {
        rows.push(JSON.parse(text.subarray(0, newline).toString("utf8")) as T);
        lengths.push(newline + 1);
        text = text.subarray(newline + 1);
      }
      carry = text;
    }
  } finally {
    await file.close();
  }
  return { rows, lengths };
}
