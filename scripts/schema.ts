// Writes src/store/schema.sql: the schema the migrations make, as pg_dump --schema-only prints it,
// without the lines that change from one dump to the next (version comments, SET lines, owners,
// pg_dump's \restrict key). Run by `npm run schema`; .ci/run runs it and fails when the committed
// file differs.
//
// It migrates a throwaway database: one created (and dropped) on the server of DATABASE_URL when
// that is set, else one on a server of its own, started and stopped with scripts/ci/postgres.sh.
import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import pg from "pg";
import { openStore } from "../src/store/database.js";

const run = promisify(execFile);
const target = fileURLToPath(new URL("../src/store/schema.sql", import.meta.url));
const postgresScript = fileURLToPath(new URL("./ci/postgres.sh", import.meta.url));

const header = `-- The current schema: what the migrations (src/store/migrations) make, dumped by
-- \`npm run schema\` (scripts/schema.ts) from a freshly migrated database. Generated: do not edit;
-- CI fails when it differs from a fresh dump. The functions' readable sources are
-- src/store/sql/functions/*.sql.
`;

/** pg_dump's output without what varies between dumps of the same schema. */
function stripVolatile(dump: string): string {
  const kept = dump
    .split("\n")
    .filter(
      (line) =>
        !/^-- Dumped (from|by) /.test(line) &&
        !/^-- (PostgreSQL database dump( complete)?)$/.test(line) &&
        !/^\\(un)?restrict /.test(line) &&
        !/^SET /.test(line) &&
        !/^SELECT pg_catalog\.set_config\(/.test(line) &&
        !/^ALTER .* OWNER TO /.test(line),
    )
    .map((line) => line.replace(/; Owner: [^;]*$/, "").trimEnd());
  // Section comments left empty ("--" lines around nothing) and runs of blank lines go.
  return (
    kept
      .join("\n")
      .replace(/^--\n(--\n)+/gm, "--\n")
      .replace(/\n{3,}/g, "\n\n")
      .replace(/^(--\n\n)+/, "")
      .trim() + "\n"
  );
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

/** pg_dump of the server's own version when we started it (its bindir), else the one on PATH. */
function pgDumpFor(serverDir: string | undefined): string {
  if (serverDir) {
    const bin = join(readFileSync(join(serverDir, "bindir"), "utf8").trim(), "pg_dump");
    if (existsSync(bin)) return bin;
  }
  return "pg_dump";
}

async function dumpSchema(serverUrl: string, serverDir: string | undefined): Promise<string> {
  const name = `forelead_schema_${process.pid}`;
  await admin(serverUrl, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  await admin(serverUrl, `CREATE DATABASE ${name}`);
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  try {
    const store = await openStore(url.toString());
    await store.close();
    const { stdout } = await run(
      pgDumpFor(serverDir),
      [
        "--schema-only",
        "--no-owner",
        "--no-privileges",
        "--exclude-table=kysely_migration*",
        url.toString(),
      ],
      { maxBuffer: 64 * 1024 * 1024 },
    );
    return stdout;
  } finally {
    await admin(serverUrl, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  }
}

async function main(): Promise<void> {
  let serverUrl = process.env.DATABASE_URL;
  let serverDir: string | undefined;
  if (!serverUrl) {
    serverDir = mkdtempSync(join(tmpdir(), "forelead-schema-"));
    serverUrl = (await run("bash", [postgresScript, "start", serverDir])).stdout.trim();
  }
  try {
    const dump = await dumpSchema(serverUrl, serverDir);
    writeFileSync(target, header + "\n" + stripVolatile(dump));
    console.log(`wrote ${target}`);
  } finally {
    if (serverDir) await run("bash", [postgresScript, "stop", serverDir]);
  }
}

await main();
