import { mkdirSync } from "node:fs";
import { resolve } from "node:path";
import { Kysely, Migrator, PostgresDialect } from "kysely";
import { PGliteDialect } from "kysely-pglite-dialect";
import { PGlite, types as pgliteTypes } from "@electric-sql/pglite";
import pg from "pg";
import type { Database } from "./schema.js";
import { migrations } from "./migrations/index.js";

/**
 * The control plane's database: kysely over embedded PGlite (a directory, or
 * "memory://") or a real Postgres server (a postgres:// URL), with LISTEN /
 * NOTIFY on both so idle claims can wait without polling.
 */
export interface Store {
  readonly db: Kysely<Database>;
  readonly kind: "embedded" | "postgres";
  /** Where the data lives, without any password: safe to log. */
  readonly description: string;
  /** Calls `onNotify` for every NOTIFY on `channel`; resolves to an unsubscribe function. */
  listen(channel: string, onNotify: (payload: string) => void): Promise<() => Promise<void>>;
  close(): Promise<void>;
}

/** Options for openStore. */
export interface OpenStoreOptions {
  /** Run migrations to the latest (default true). */
  readonly migrate?: boolean;
}

/** Opens (and migrates) the database at `location`: a postgres:// URL, a directory or "memory://". */
export async function openStore(location: string, options: OpenStoreOptions = {}): Promise<Store> {
  const store = isPostgresUrl(location) ? await openPostgres(location) : await openEmbedded(location);
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
export async function migrateToLatest(db: Kysely<Database>): Promise<void> {
  const migrator = new Migrator({ db, provider: { getMigrations: async () => migrations } });
  const { error, results } = await migrator.migrateToLatest();
  if (error) {
    const failed = results?.find((r) => r.status === "Error")?.migrationName ?? "(before any migration ran)";
    throw new Error(`database migration ${failed} failed: ${error instanceof Error ? error.message : String(error)}`);
  }
}

/** A postgres:// URL with its password replaced by "***". */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = "***";
    return u.toString();
  } catch {
    return "(an unparseable database URL)";
  }
}

async function openPostgres(url: string): Promise<Store> {
  const description = redactUrl(url);
  // int8 as JS numbers on both dialects: counters, sizes and offsets stay below 2^53.
  const typeParsers = {
    getTypeParser: (oid: number, format?: "text" | "binary") =>
      oid === pg.types.builtins.INT8 ? (v: string) => Number(v) : pg.types.getTypeParser(oid, format as "text"),
  };
  const pool = new pg.Pool({ connectionString: url, max: 20, types: typeParsers as pg.CustomTypesConfig });
  pool.on("error", (err) => console.error(`database: an idle connection failed: ${err.message}`));
  try {
    const client = await pool.connect();
    client.release();
  } catch (err) {
    await pool.end().catch(() => {});
    throw new Error(`cannot reach the database at ${description}: ${(err as Error).message}; check the URL and that the server is running`);
  }
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
  let listener: pg.Client | undefined;
  const handlers = new Map<string, Set<(payload: string) => void>>();
  return {
    db,
    kind: "postgres",
    description,
    async listen(channel, onNotify) {
      if (!listener) {
        listener = new pg.Client({ connectionString: url });
        listener.on("notification", (n) => handlers.get(n.channel)?.forEach((h) => h(n.payload ?? "")));
        listener.on("error", (err) => console.error(`database: the LISTEN connection failed: ${err.message}`));
        await listener.connect();
      }
      let set = handlers.get(channel);
      if (!set) {
        set = new Set();
        handlers.set(channel, set);
        await listener.query(`LISTEN ${checkedChannel(channel)}`);
      }
      set.add(onNotify);
      return async () => {
        set.delete(onNotify);
      };
    },
    async close() {
      await listener?.end().catch(() => {});
      await db.destroy();
    },
  };
}

async function openEmbedded(location: string): Promise<Store> {
  const inMemory = location === "memory://";
  const dataDir = inMemory ? undefined : resolve(location);
  if (dataDir) mkdirSync(dataDir, { recursive: true });
  let pglite: PGlite;
  try {
    pglite = await PGlite.create({
      ...(dataDir ? { dataDir } : {}),
      parsers: { [pgliteTypes.INT8]: (v: string) => Number(v) },
    });
  } catch (err) {
    throw new Error(`cannot open the embedded database in ${dataDir ?? "memory"}: ${(err as Error).message}; is another forelead process using it?`);
  }
  const db = new Kysely<Database>({ dialect: new PGliteDialect(pglite) });
  return {
    db,
    kind: "embedded",
    description: dataDir ? `embedded Postgres (PGlite) in ${dataDir}` : "embedded Postgres (PGlite) in memory",
    async listen(channel, onNotify) {
      const unsubscribe = await pglite.listen(channel, onNotify);
      return async () => unsubscribe();
    },
    async close() {
      await db.destroy();
      if (!pglite.closed) await pglite.close();
    },
  };
}

/** Channel names are fixed identifiers in the code; refuse anything else rather than quote it. */
function checkedChannel(channel: string): string {
  if (!/^[a-z_][a-z0-9_]{0,62}$/.test(channel)) throw new Error(`invalid LISTEN channel name ${JSON.stringify(channel)}`);
  return channel;
}
