import { mkdirSync } from "node:fs";
import { resolve } from "node:path";
import { Kysely, Migrator, PostgresDialect } from "kysely";
import type { PGlite } from "@electric-sql/pglite";
import type pg from "pg";
import type { Database } from "./schema.js";
import { createDatabaseHealth, type DatabaseHealth } from "./health.js";
import { migrations } from "./migrations/index.js";
import { watchedPool } from "./watched-pool.js";

/**
 * The control plane's database: kysely over embedded PGlite (a directory, or
 * "memory://") or a real Postgres server (a postgres:// URL), with LISTEN /
 * NOTIFY on both so idle claims can wait without polling. A Postgres server
 * may go away and come back: its connections heal by themselves (see
 * DESIGN.md "Failure handling"); the embedded database cannot go away.
 */
export interface Store {
  readonly db: Kysely<Database>;
  readonly kind: "embedded" | "postgres";
  /** Where the data lives, without any password: safe to log. */
  readonly description: string;
  /** Whether the database answers; for the embedded database, always. */
  readonly health: DatabaseHealth;
  /**
   * Calls `onNotify` for every NOTIFY on `channel`, and `onRecheck` when
   * notifications may have been lost (the LISTEN connection was down and is
   * back): the subscriber then looks at the database itself. Resolves to an
   * unsubscribe function.
   */
  listen(
    channel: string,
    onNotify: (payload: string) => void,
    onRecheck?: () => void,
  ): Promise<() => Promise<void>>;
  /** True while notifications arrive: the LISTEN connection is up (always, embedded). */
  readonly listening: boolean;
  /** The connection pool's use now; undefined for the embedded database, which has none. */
  poolUse(): PoolUse | undefined;
  close(): Promise<void>;
}

/** How many connections a Postgres store's pool holds, and who waits for one. */
interface PoolUse {
  readonly max: number;
  readonly total: number;
  readonly idle: number;
  /** Queries waiting for a connection. */
  readonly waiting: number;
}

/** Options for openStore. */
export interface OpenStoreOptions {
  /** Run migrations to the latest (default true). */
  readonly migrate?: boolean;
}

/**
 * Opens (and migrates) the database at `location`: a postgres:// URL, a directory or "memory://".
 */
export async function openStore(location: string, options: OpenStoreOptions = {}): Promise<Store> {
  const store = isPostgresUrl(location)
    ? await openPostgres(location)
    : await openEmbedded(location);
  if (options.migrate ?? true) {
    try {
      await migrateToLatest(store.db);
    } catch (err) {
      await store.close();
      throw err;
    }
  }
  return store;
}

/** True for postgres:// and postgresql:// URLs. */
export function isPostgresUrl(location: string): boolean {
  return /^postgres(ql)?:\/\//.test(location);
}

/** Runs every pending migration; throws naming the one that failed. */
async function migrateToLatest(db: Kysely<Database>): Promise<void> {
  const migrator = new Migrator({ db, provider: { getMigrations: async () => migrations } });
  const { error, results } = await migrator.migrateToLatest();
  if (error) {
    const failed =
      results?.find((r) => r.status === "Error")?.migrationName ?? "(before any migration ran)";
    throw new Error(
      `database migration ${failed} failed: ${error instanceof Error ? error.message : String(error)}`,
    );
  }
}

/**
 * The migrations this build knows that are not among `applied` (the database's), in order (none:
 * current).
 */
export function pendingMigrations(applied: readonly string[]): string[] {
  return Object.keys(migrations).filter((m) => !applied.includes(m));
}

/** The migrations among `applied` that this build does not know (a newer build ran them). */
export function unknownMigrations(applied: readonly string[]): string[] {
  const known = new Set(Object.keys(migrations));
  return applied.filter((m) => !known.has(m));
}

/** A postgres:// URL with its password replaced by "***". */
function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = "***";
    return u.toString();
  } catch {
    return "(an unparseable database URL)";
  }
}

async function openPostgres(url: string): Promise<Store> {
  // Each driver is loaded only when its kind of database is opened: a start on the embedded
  // database does not load pg, one on a server does not load PGlite (docs/performance.md,
  // "Start-up").
  const [{ default: pg }, { createListenClient }] = await Promise.all([
    import("pg"),
    import("./listen-client.js"),
  ]);
  const description = redactUrl(url);
  // int8 as JS numbers on both dialects: counters, sizes and offsets stay below 2^53.
  const typeParsers = {
    getTypeParser: (oid: number, format?: "text" | "binary") =>
      oid === pg.types.builtins.INT8
        ? (v: string) => Number(v)
        : pg.types.getTypeParser(oid, format as "text"),
  };
  // connectionTimeoutMillis: with the server's host gone, a request fails (503) instead of hanging.
  const poolMax = 20;
  const pool = new pg.Pool({
    connectionString: url,
    max: poolMax,
    connectionTimeoutMillis: 5_000,
    keepAlive: true,
    types: typeParsers as pg.CustomTypesConfig,
  });
  const health = createDatabaseHealth({ description, probe: () => pool.query("select 1") });
  const watched = watchedPool(pool, health);
  try {
    const client = await pool.connect();
    client.release();
  } catch (err) {
    health.close();
    await pool.end().catch(() => {});
    throw new Error(
      `cannot reach the database at ${description}: ${(err as Error).message}; ` +
        `check the URL and that the server is running`,
    );
  }
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool: watched }) });
  const listener = createListenClient(url, health);
  return {
    db,
    kind: "postgres",
    description,
    health,
    async listen(channel, onNotify, onRecheck) {
      const unsubscribe = await listener.listen(channel, { onNotify, onRecheck });
      return async () => unsubscribe();
    },
    get listening() {
      return listener.connected;
    },
    poolUse: () => ({
      max: poolMax,
      total: pool.totalCount,
      idle: pool.idleCount,
      waiting: pool.waitingCount,
    }),
    async close() {
      health.close();
      await listener.close();
      await db.destroy();
    },
  };
}

/**
 * The embedded server's buffer cache. initdb writes 128MB, which Postgres touches in full at start:
 * ~150 MiB of the idle process and a third of its open time. The embedded database is for one
 * machine's development and small fleets; pages it evicts stay in the OS page cache. Measured in
 * docs/performance.md ("Idle memory"): 128MB → 16MB cut an idle serve's RSS by ~150 MiB, 16MB →
 * 8MB by another ~8 MiB once settled (140–148 → 133–140 MiB, against the goal of 150).
 */
const embeddedSharedBuffers = "8MB";

async function openEmbedded(location: string): Promise<Store> {
  const inMemory = location === "memory://";
  const dataDir = inMemory ? undefined : resolve(location);
  if (dataDir) mkdirSync(dataDir, { recursive: true });
  const [{ PGlite, types: pgliteTypes }, { PGliteDialect }] = await Promise.all([
    import("@electric-sql/pglite"),
    import("kysely-pglite-dialect"),
  ]);
  let pglite: PGlite;
  try {
    pglite = await PGlite.create({
      dataDir,
      startParams: [...PGlite.defaultStartParams, "-c", `shared_buffers=${embeddedSharedBuffers}`],
      parsers: { [pgliteTypes.INT8]: (v: string) => Number(v) },
    });
  } catch (err) {
    throw new Error(
      `cannot open the embedded database in ${dataDir ?? "memory"}: ` +
        `${(err as Error).message}; is another forelead process using it?`,
    );
  }
  const db = new Kysely<Database>({ dialect: new PGliteDialect(pglite) });
  const description = dataDir
    ? `embedded Postgres (PGlite) in ${dataDir}`
    : "embedded Postgres (PGlite) in memory";
  // In this process: it cannot become unreachable, so nothing reports to it and it never probes.
  const health = createDatabaseHealth({ description, probe: () => pglite.query("select 1") });
  return {
    db,
    kind: "embedded",
    description,
    health,
    async listen(channel, onNotify) {
      const unsubscribe = await pglite.listen(channel, onNotify);
      return async () => unsubscribe();
    },
    listening: true,
    poolUse: () => undefined,
    async close() {
      health.close();
      await db.destroy();
      if (!pglite.closed) await pglite.close();
    },
  };
}
