import { existsSync } from "node:fs";
import { readdir, stat } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { DirectoryInUse } from "../store/data-dir-lock.js";
import { isPostgresUrl } from "../store/database.js";
import { adoptingCommand, auditSpoolFile, openAuditSpool, readSpoolTag } from "./audit-spool.js";

/** What adopting orphaned spools needs. */
export interface SpoolAdoption<T> {
  /** The folder of replicas' spools, one sub-folder each. */
  readonly root: string;
  /** This replica's own spool, never adopted. */
  readonly own: string;
  /** This replica's database: only spools tagged with it are adopted. */
  readonly database: string;
  readonly isRow: (value: unknown) => value is T;
  readonly timeOf: (row: T) => Date;
  readonly maxBatch: number;
  /** Stores a batch in the database, idempotently (by record id); throws when it cannot. */
  readonly store: (rows: readonly T[]) => Promise<void>;
}

/**
 * Drains into the database every spool under `root` that holds records and
 * no live process holds (its replica stopped or crashed and was not started
 * again), so no spooled record is stranded. The spool's lock decides: one
 * held by a live replica is left to it, and a replica starting while its
 * spool is adopted waits for the adoption to end. A spool is adopted only
 * when its tag names this database; an untagged one (an earlier version's)
 * only at `root` itself, the earlier shared default, and only when no
 * embedded database sits beside it (whose spool that path also was).
 * Each spool on its own: one that fails (unreadable, or the database
 * refused its rows) is tried again next time; the others are adopted.
 * Returns the records written and what failed.
 */
export async function adoptOrphanSpools<T>(
  options: SpoolAdoption<T>,
): Promise<{ written: number; failures: string[] }> {
  const root = resolve(options.root);
  const own = resolve(options.own);
  const names = await readdir(root, { withFileTypes: true }).catch(() => []);
  const candidates = [
    root,
    ...names.filter((e) => e.isDirectory()).map((e) => join(root, e.name)),
  ].filter((dir) => dir !== own);
  let written = 0;
  const failures: string[] = [];
  for (const dir of candidates) {
    const size = await stat(join(dir, auditSpoolFile)).then(
      (s) => s.size,
      () => 0,
    );
    if (size === 0) continue;
    const tag = await readSpoolTag(dir);
    const legacy = tag === undefined && dir === root && !existsSync(join(dirname(root), "db"));
    if (tag !== options.database && !legacy) continue;
    try {
      written += await adoptSpool(dir, options);
    } catch (err) {
      failures.push(`${dir}: ${(err as Error).message}`);
    }
  }
  return { written, failures };
}

async function adoptSpool<T>(dir: string, options: SpoolAdoption<T>): Promise<number> {
  let spool;
  try {
    spool = await openAuditSpool<T>({
      dir,
      maxBytes: Number.MAX_SAFE_INTEGER,
      timeOf: options.timeOf,
      isRow: options.isRow,
      database: options.database,
      command: adoptingCommand,
    });
  } catch (err) {
    if (err instanceof DirectoryInUse) return 0; // a live replica's: it drains its own
    throw err;
  }
  let written = 0;
  try {
    const found = spool.records;
    while (spool.records > 0) {
      const rows = await spool.peek(options.maxBatch);
      if (rows.length > 0) await options.store(rows);
      await spool.take(rows.length);
      written += rows.length;
    }
    if (found > 0)
      console.error(
        `audit: adopted the spool ${spool.path}, which no live process held: ` +
          `wrote its ${written} records to the database`,
      );
  } finally {
    spool.close();
  }
  return written;
}

/**
 * A database's name for the spool's tag, without credentials: host, port and
 * database of a postgres:// URL, the absolute directory of an embedded one.
 */
export function spoolDatabaseTag(location: string): string {
  if (!isPostgresUrl(location)) return location === "memory://" ? location : resolve(location);
  const url = new URL(location);
  return `postgres://${url.hostname}:${url.port || "5432"}${url.pathname}`;
}
