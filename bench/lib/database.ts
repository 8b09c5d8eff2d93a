import pg from "pg";

/** A database made for one benchmark run. */
export interface BenchDatabase {
  /** What the control plane's --database gets: a postgres:// URL, or "memory://" when embedded. */
  readonly location: string;
  readonly kind: "postgres" | "embedded";
  drop(): Promise<void>;
}

/**
 * A fresh database named `name` on the server of `serverUrl` (dropped first
 * if a previous run left it), or the embedded in-memory database when there
 * is no server. Creating it costs about a second; every system under test
 * gets its own, so none inherits another's dead rows.
 */
export async function freshDatabase(
  serverUrl: string | undefined,
  name: string,
): Promise<BenchDatabase> {
  if (!serverUrl) return { location: "memory://", kind: "embedded", drop: async () => {} };
  await adminQuery(serverUrl, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  await adminQuery(serverUrl, `CREATE DATABASE ${name}`);
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return {
    location: url.toString(),
    kind: "postgres",
    drop: () => dropWhenUnused(serverUrl, name),
  };
}

/**
 * Drops the database once the last connection to it has gone (a pool that
 * was just closed can take a moment); after 5 s, with FORCE, which cuts
 * whatever is left (its owner then logs the cut connection).
 */
async function dropWhenUnused(serverUrl: string, name: string): Promise<void> {
  for (let attempt = 0; attempt < 50; attempt++) {
    try {
      await adminQuery(serverUrl, `DROP DATABASE IF EXISTS ${name}`);
      return;
    } catch (err) {
      // object_in_use: someone is still connected
      if ((err as { code?: string }).code !== "55006") throw err;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  await adminQuery(serverUrl, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
}

async function adminQuery(url: string, statement: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(statement);
  } finally {
    await client.end();
  }
}
