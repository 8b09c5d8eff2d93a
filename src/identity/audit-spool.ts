import { mkdir, open, readFile, rename, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import {
  DirectoryInUse,
  lockDirectory,
  type DirectoryLock,
  type LockHolder,
} from "../store/data-dir-lock.js";
import { fsyncPath } from "../store/fsync-path.js";

/**
 * An append-only file of audit rows the database could not take, one JSON
 * object per line, oldest first, in a directory one process holds (locked
 * as the embedded database's directory is). Every append is fsynced before
 * it returns, so a row in the spool survives a crash; rows are taken out
 * from the front, in order, once they are stored, and the file is emptied
 * when the last one is.
 *
 * The file is the truth, not what this process remembers of it: before every
 * read, append and emptying the spool checks that the file is the one it
 * wrote (same inode, same length) and otherwise counts it again as it is now.
 * A line that is not a whole, well-formed row (a torn append, a hand edit,
 * a file cut by another process) is moved to the quarantine file beside the
 * spool, fsynced, with one log line, and the rows around it are written as
 * usual: no bad line ever holds the spool back.
 */
export interface AuditSpool<T> {
  readonly path: string;
  /** Where lines that are not whole rows are moved. */
  readonly quarantinePath: string;
  /** The process holding the spool: this one. */
  readonly holder: LockHolder;
  /** Lines in the spool not yet taken out (a bad one among them is quarantined when reached). */
  readonly records: number;
  /** Bytes of those lines. */
  readonly bytes: number;
  /** The time of the oldest row not yet taken out. */
  readonly oldest: Date | undefined;
  /** Lines in the quarantine file, by every process that held the spool. */
  readonly quarantined: number;
  /** Lines this process moved to the quarantine file. */
  readonly quarantinedHere: number;
  /**
   * Appends rows after every row already there, fsynced; throws when they cannot be written whole.
   * Reads `rows` only before its first await.
   */
  append(rows: readonly T[]): Promise<void>;
  /** The oldest rows not yet taken out, at most `max`. */
  peek(max: number): Promise<readonly T[]>;
  /**
   * Takes out the first `count` rows that peek returned (they are stored), and the bad lines before
   * and among them.
   */
  take(count: number): Promise<void>;
  /** Releases the spool's lock. */
  close(): void;
}

/** What opening a spool needs. */
export interface AuditSpoolOptions<T> {
  readonly dir: string;
  /**
   * The file may grow to this many bytes; an append past it throws (the caller then fails closed).
   */
  readonly maxBytes: number;
  readonly timeOf: (row: T) => Date;
  /** Whether a parsed line is a row the database can take; one that is not is quarantined. */
  readonly isRow: (value: unknown) => value is T;
  /** Written to the spool's tag file: which database its rows are for (no credentials). */
  readonly database: string;
  /** Called with the number of lines each time some are quarantined (for a metric). */
  readonly onQuarantine?: (lines: number) => void;
  /** What holds the lock, as its lock file says; "forelead serve" by default. */
  readonly command?: string;
  /**
   * How many numbered alternatives of `dir` to try when another live process holds it (0 by
   * default: refused).
   */
  readonly alternates?: number;
}

/**
 * The lock's command while a replica drains a spool no live process held
 * (src/identity/audit-spool-adoption.ts).
 */
export const adoptingCommand = "forelead serve (adopting an orphaned spool)";
/** How long a start waits for a replica adopting its spool to finish. */
const adoptionWaitMs = 30_000;

/** The lock of `options.dir`, or of the first alternative no live process holds. */
async function lockFirstFree<T>(
  options: AuditSpoolOptions<T>,
): Promise<{ lock: DirectoryLock; dir: string }> {
  const command = options.command ?? "forelead serve";
  const alternates = options.alternates ?? 0;
  for (let n = 1; ; n++) {
    const dir = n === 1 ? options.dir : `${options.dir}.${n}`;
    try {
      return { lock: await lockSpool(dir, command), dir };
    } catch (err) {
      if (!(err instanceof DirectoryInUse) || n > alternates) throw err;
    }
  }
}

/**
 * The spool's lock. A replica draining this spool as an orphan holds it for
 * the moment that takes: the start waits for it rather than refusing.
 */
async function lockSpool(dir: string, command: string): Promise<DirectoryLock> {
  const deadline = Date.now() + adoptionWaitMs;
  for (;;) {
    try {
      return lockDirectory(dir, command, spoolInUseHint);
    } catch (err) {
      if (
        !(err instanceof DirectoryInUse) ||
        err.holder.command !== adoptingCommand ||
        Date.now() > deadline
      )
        throw err;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

/** The spool file's name in its directory. */
export const auditSpoolFile = "audit-spool.ndjson";
/** The quarantine file's name, beside the spool file. */
export const auditQuarantineFile = "audit-spool.quarantine";
/** The tag file: `{"database": ...}`, so a replica adopts only spools of its own database. */
const auditSpoolTagFile = "audit-spool.json";

/** The hint of the refusal when another live process holds the spool. */
const spoolInUseHint = "stop it, or give this replica a spool of its own with --audit-spool";

const readChunkBytes = 1024 * 1024;
const newline = 10;

/**
 * One line of the file, newline included in its length: its rows (one for a
 * whole line; several, or none, for a line two appends ran into) and the
 * bad parts to quarantine.
 */
interface Line<T> {
  readonly length: number;
  readonly rows: readonly T[];
  readonly bad: readonly { readonly bytes: Buffer; readonly why: string }[];
}

/**
 * Locks `dir` (creating it) for this process or throws DirectoryInUse naming
 * the holder, then opens the spool in it, counting what an earlier run left.
 * With `alternates`, a `dir` another live process holds is passed over for
 * the first free of `dir.2`, `dir.3` ….
 */
export async function openAuditSpool<T>(options: AuditSpoolOptions<T>): Promise<AuditSpool<T>> {
  const { maxBytes, timeOf, isRow } = options;
  const { lock, dir } = await lockFirstFree(options);
  try {
    return await openLocked(options, lock, dir, maxBytes, timeOf, isRow);
  } catch (err) {
    lock.close();
    throw err;
  }
}

async function openLocked<T>(
  options: AuditSpoolOptions<T>,
  lock: DirectoryLock,
  dir: string,
  maxBytes: number,
  timeOf: (row: T) => Date,
  isRow: (value: unknown) => value is T,
): Promise<AuditSpool<T>> {
  const path = join(dir, auditSpoolFile);
  const quarantinePath = join(dir, auditQuarantineFile);
  const holder = JSON.parse(await readFile(lock.file, "utf8")) as LockHolder;
  await writeTag(dir, options.database);
  let quarantined = await countLines(quarantinePath);
  let quarantinedHere = 0;
  // The file as this process left it: its inode and length, the bytes already taken out, the lines
  // after them.
  let ino = 0;
  let size = 0;
  let offset = 0;
  let records = 0;
  let oldest: Date | undefined;
  let peeked: Line<T>[] = [];
  let peekedToEnd = false;

  async function quarantine(lines: readonly Line<T>[], where: string): Promise<void> {
    const bad = lines.flatMap((l) => l.bad);
    if (bad.length === 0) return;
    const data = Buffer.concat(bad.flatMap((b) => [b.bytes, Buffer.from("\n")]));
    const file = await open(quarantinePath, "a", 0o600);
    try {
      await file.write(data);
      await file.sync();
    } finally {
      await file.close();
    }
    quarantined += bad.length;
    quarantinedHere += bad.length;
    options.onQuarantine?.(bad.length);
    const why = [...new Set(bad.map((b) => b.why))].join("; ");
    console.error(
      `audit: moved ${bad.length} unreadable line(s) of the spool ${path} ` +
        `(${why}; ${where}) to ${quarantinePath}; the rows around them are ` +
        `written as usual`,
    );
  }

  /**
   * Counts the file as it is now; a last line without its newline (a torn append) is quarantined
   * and cut off.
   */
  async function rescan(): Promise<void> {
    const now = await statFile(path);
    let whole = now.size;
    if (now.size > 0) {
      whole = await lastNewline(path, now.size);
      if (whole < now.size) {
        const tail = await readRange(path, whole, now.size - whole);
        await quarantine(
          [{ length: tail.length, rows: [], bad: [{ bytes: tail, why: "a torn append" }] }],
          "the last line, without its newline",
        );
        await truncate(path, whole);
      }
    }
    ino = now.ino;
    size = whole;
    offset = 0;
    records = whole === 0 ? 0 : await countNewlines(path, whole);
    peeked = [];
    peekedToEnd = false;
    oldest = undefined;
    await findOldest();
  }

  /**
   * Rescans when the file is not the one this process wrote: truncated, replaced or grown by
   * someone else.
   */
  async function verify(): Promise<void> {
    const now = await statFile(path);
    if (now.ino === ino && now.size === size) return;
    const before = { ino, records };
    const change = describeChange(ino, size, now);
    await rescan();
    if (before.ino !== 0 || now.size !== 0)
      console.error(
        `audit: the spool ${path} was changed by another process (${change}); ` +
          `counted again: ${records} lines wait in it, ${before.records} did before`,
      );
  }

  const rowsIn = (lines: readonly Line<T>[]) => lines.reduce((n, l) => n + l.rows.length, 0);

  /** Reads lines from the front until `max` rows are in hand or the file ends. */
  async function fill(max: number): Promise<void> {
    if (rowsIn(peeked) >= max || peekedToEnd) return;
    const read = await readLines(path, offset, size, max, isRow);
    peeked = read.lines;
    peekedToEnd = read.end;
    if (read.end && read.consumed < size - offset) {
      // Fewer whole lines than the count says: the file changed between the check and the read.
      await rescan();
      return fill(max);
    }
  }

  async function findOldest(): Promise<void> {
    // Lines without a row at the front are quarantined here, so the oldest is always a row's time.
    for (;;) {
      if (records === 0) {
        oldest = undefined;
        return;
      }
      await fill(1);
      const first = peeked.find((l) => l.rows.length > 0);
      if (first) {
        oldest = timeOf(first.rows[0]!);
        return;
      }
      if (peeked.length === 0)
        throw new Error(`${path}: ${records} lines counted from byte ${offset}, none read`);
      await consume(peeked.length);
    }
  }

  /** Takes out the first `n` lines of peeked: quarantines their bad parts, then moves past them. */
  async function consume(n: number): Promise<void> {
    const gone = peeked.slice(0, n);
    await quarantine(gone, `from byte ${offset}`);
    offset += gone.reduce((sum, l) => sum + l.length, 0);
    records -= gone.length;
    peeked = peeked.slice(n);
    if (records > 0) return;
    // Everything is stored: empty the file, so it never grows past one outage's records.
    await verify();
    if (records > 0 || size === 0) return;
    await truncate(path, 0);
    size = offset = 0;
    peeked = [];
    peekedToEnd = false;
  }

  await rescan();

  return {
    path,
    quarantinePath,
    holder,
    get records() {
      return records;
    },
    get bytes() {
      return size - offset;
    },
    get oldest() {
      return oldest;
    },
    get quarantined() {
      return quarantined;
    },
    get quarantinedHere() {
      return quarantinedHere;
    },
    async append(rows) {
      const count = rows.length;
      if (count === 0) return;
      const first = timeOf(rows[0]!);
      const data = Buffer.from(rows.map((r) => `${JSON.stringify(r)}\n`).join(""));
      await mkdir(dir, { recursive: true });
      await verify();
      if (size + data.length > maxBytes)
        throw new Error(`the spool is full (${size} bytes; --audit-spool-max-size is ${maxBytes})`);
      const created = size === 0;
      const file = await open(path, "a", 0o600);
      try {
        // A write to a nearly full disk may take only part of the buffer without an error.
        for (let written = 0; written < data.length;)
          written += (await file.write(data, written, data.length - written)).bytesWritten;
        await file.sync();
        ino = (await file.stat()).ino;
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
      peekedToEnd = false;
    },
    async peek(max) {
      await verify();
      await fill(max);
      // Whole lines only, so that take() never splits one: a line two appends ran into may hold two
      // rows.
      const rows: T[] = [];
      for (const line of peeked) {
        if (rows.length >= max) break;
        rows.push(...line.rows);
      }
      return rows;
    },
    async take(count) {
      // The lines holding the first `count` rows, and the lines without a row before them.
      let n = 0;
      for (let rows = 0; n < peeked.length; n++) {
        const line = peeked[n]!;
        if (rows === count && line.rows.length > 0) break;
        rows += line.rows.length;
        if (rows > count)
          throw new Error(`audit spool: take(${count}) splits a line; take what peek returned`);
      }
      if (count > rowsIn(peeked.slice(0, n)))
        throw new Error(`audit spool: take(${count}) after a peek of ${rowsIn(peeked)}`);
      await consume(n);
      await findOldest();
    },
    close: () => lock.close(),
  };
}

/** Where a row written by this spool starts: a line two appends ran into is split there. */
const rowStart = Buffer.from('{"record_id":');

/**
 * The rows of one line (newline excluded). A line that is not one row is
 * split where rows start (a torn append followed by a whole one) and each
 * part is a row or a bad part.
 */
function parseLine<T>(
  line: Buffer,
  isRow: (value: unknown) => value is T,
): Omit<Line<T>, "length"> {
  const whole = parsePart(line, isRow);
  if ("row" in whole) return { rows: [whole.row], bad: [] };
  const rows: T[] = [];
  const bad: { bytes: Buffer; why: string }[] = [];
  let start = 0;
  for (;;) {
    const next = line.indexOf(rowStart, start + 1);
    const part = line.subarray(start, next < 0 ? line.length : next);
    const parsed = part === line ? whole : parsePart(part, isRow);
    if ("row" in parsed) rows.push(parsed.row);
    else bad.push({ bytes: Buffer.from(part), why: parsed.why });
    if (next < 0) return { rows, bad };
    start = next;
  }
}

function parsePart<T>(
  part: Buffer,
  isRow: (value: unknown) => value is T,
): { row: T } | { why: string } {
  let value: unknown;
  try {
    value = JSON.parse(part.toString("utf8"));
  } catch {
    return { why: "not JSON" };
  }
  return isRow(value) ? { row: value } : { why: "not an audit row" };
}

/**
 * Lines from `offset` until `max` rows or `size`; `consumed` counts their bytes, `end` whether
 * `size` was reached.
 */
async function readLines<T>(
  path: string,
  offset: number,
  size: number,
  max: number,
  isRow: (value: unknown) => value is T,
): Promise<{ lines: Line<T>[]; consumed: number; end: boolean }> {
  const lines: Line<T>[] = [];
  let rows = 0;
  let consumed = 0;
  const file = await open(path, "r");
  try {
    let at = offset;
    let carry = Buffer.alloc(0);
    while (rows < max && at < size) {
      const chunk = Buffer.alloc(Math.min(readChunkBytes, size - at));
      const { bytesRead } = await file.read(chunk, 0, chunk.length, at);
      if (bytesRead === 0) break;
      at += bytesRead;
      let text = Buffer.concat([carry, chunk.subarray(0, bytesRead)]);
      let end: number;
      while (rows < max && (end = text.indexOf(newline)) >= 0) {
        const line = { length: end + 1, ...parseLine(text.subarray(0, end), isRow) };
        lines.push(line);
        rows += line.rows.length;
        consumed += end + 1;
        text = text.subarray(end + 1);
      }
      carry = text;
    }
  } finally {
    await file.close();
  }
  return { lines, consumed, end: offset + consumed >= size || rows < max };
}

async function statFile(path: string): Promise<{ ino: number; size: number }> {
  return stat(path).then(
    (s) => ({ ino: s.ino, size: s.size }),
    (err: NodeJS.ErrnoException) => {
      if (err.code === "ENOENT") return { ino: 0, size: 0 };
      throw err;
    },
  );
}

function describeChange(ino: number, size: number, now: { ino: number; size: number }): string {
  if (now.ino === 0) return "removed";
  if (now.ino !== ino && ino !== 0) return "replaced by another file";
  return now.size < size
    ? `cut from ${size} to ${now.size} bytes`
    : `grown from ${size} to ${now.size} bytes`;
}

/** The length of the file up to and including its last newline. */
async function lastNewline(path: string, size: number): Promise<number> {
  const file = await open(path, "r");
  try {
    for (let end = size; end > 0;) {
      const start = Math.max(0, end - readChunkBytes);
      const chunk = Buffer.alloc(end - start);
      await file.read(chunk, 0, chunk.length, start);
      const last = chunk.lastIndexOf(newline);
      if (last >= 0) return start + last + 1;
      end = start;
    }
    return 0;
  } finally {
    await file.close();
  }
}

async function readRange(path: string, start: number, length: number): Promise<Buffer> {
  const file = await open(path, "r");
  try {
    const buffer = Buffer.alloc(length);
    const { bytesRead } = await file.read(buffer, 0, length, start);
    return buffer.subarray(0, bytesRead);
  } finally {
    await file.close();
  }
}

/** Newlines in the first `size` bytes of the file. */
async function countNewlines(path: string, size: number): Promise<number> {
  const file = await open(path, "r");
  try {
    let count = 0;
    const chunk = Buffer.alloc(readChunkBytes);
    for (let at = 0; at < size;) {
      const { bytesRead } = await file.read(chunk, 0, Math.min(chunk.length, size - at), at);
      if (bytesRead === 0) break;
      for (
        let i = chunk.indexOf(newline);
        i >= 0 && i < bytesRead;
        i = chunk.indexOf(newline, i + 1)
      )
        count++;
      at += bytesRead;
    }
    return count;
  } finally {
    await file.close();
  }
}

/** Lines of a file that may be missing (0 then). */
async function countLines(path: string): Promise<number> {
  const { size } = await statFile(path);
  return size === 0 ? 0 : countNewlines(path, size);
}

async function truncate(path: string, length: number): Promise<void> {
  const file = await open(path, "r+");
  try {
    await file.truncate(length);
    await file.sync();
  } finally {
    await file.close();
  }
}

/** Writes the tag file (atomically) unless it already says `database`. */
async function writeTag(dir: string, database: string): Promise<void> {
  const path = join(dir, auditSpoolTagFile);
  const text = `${JSON.stringify({ database })}\n`;
  const current = await readFile(path, "utf8").catch(() => "");
  if (current === text) return;
  await writeFile(`${path}.tmp`, text, { mode: 0o600 });
  await rename(`${path}.tmp`, path);
  await fsyncPath(dir);
}

/**
 * The database a spool's tag file names, or undefined when it has none (an earlier version's
 * spool).
 */
export async function readSpoolTag(dir: string): Promise<string | undefined> {
  const text = await readFile(join(dir, auditSpoolTagFile), "utf8").catch(() => undefined);
  if (text === undefined) return undefined;
  try {
    const tag = JSON.parse(text) as { database?: unknown };
    return typeof tag.database === "string" ? tag.database : undefined;
  } catch {
    return undefined;
  }
}
