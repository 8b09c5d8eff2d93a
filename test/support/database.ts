import pg from "pg";
import { createHash } from "node:crypto";
import { secretsKey } from "../../src/secrets/box.js";
import type { SecretsKeys } from "../../src/secrets/keys.js";

/**
 * A database for one test file: embedded in memory, or a fresh database on the server named by
 * DATABASE_URL.
 */
export interface TestDatabase {
  /** What `--database` would be given: "memory://" or a postgres:// URL. */
  readonly location: string;
  readonly kind: "embedded" | "postgres";
  drop(): Promise<void>;
}

/** Which database the suite runs against: real Postgres when DATABASE_URL is set. */
export const databaseKind: "embedded" | "postgres" = process.env.DATABASE_URL
  ? "postgres"
  : "embedded";

/**
 * Embedded: "memory://" (each control plane then has its own database, so
 * replica tests need Postgres). Postgres: CREATE DATABASE with a random name,
 * dropped (with FORCE) afterwards, so test files never see each other's rows.
 */
export async function createTestDatabase(): Promise<TestDatabase> {
  const url = process.env.DATABASE_URL;
  if (!url) return { location: "memory://", kind: "embedded", drop: async () => {} };
  const name = `forelead_t_${process.pid}_${Math.random().toString(36).slice(2, 10)}`;
  await admin(url, `CREATE DATABASE ${name}`);
  const location = new URL(url);
  location.pathname = `/${name}`;
  return {
    location: location.toString(),
    kind: "postgres",
    drop: () => admin(url, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`),
  };
}

async function admin(url: string, statement: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(statement);
  } finally {
    await client.end();
  }
}

/**
 * The secrets key of a database location, derived from it: every control
 * plane started on it, in any test process (replicas, restarts, a child
 * process), gets the same one. A test key, not a secret.
 */
export function testSecretsKeys(location: string): SecretsKeys {
  return {
    current: secretsKey(
      createHash("sha256").update(`forelead test secrets key ${location}`).digest(),
      `the test key of ${location}`,
    ),
  };
}
