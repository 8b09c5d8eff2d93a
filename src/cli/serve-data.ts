import { existsSync } from "node:fs";
import { createServer } from "node:net";
import { dirname, join, resolve } from "node:path";
import { isPostgresUrl } from "../store/database.js";
import {
  defaultSecretsKeyPath,
  openEmbeddedSecretsKey,
  readSecretsKeyFile,
} from "../secrets/key-file.js";
import type { SecretsKeys } from "../secrets/keys.js";

/** The flags that say where serve keeps its files. */
export interface ServeDataFlags {
  /** --data-dir, absolute: the one directory serve writes its state into. */
  dataDir: string;
  /** --database as given (a URL, "memory://" or an absolute directory), or absent. */
  database?: string;
  secretsKey?: string;
  secretsKeyPrevious?: string;
}

/** The database serve opens: --database, or the embedded one at `<data-dir>/db`. */
export function serveDatabase(flags: ServeDataFlags): string {
  return flags.database ?? join(flags.dataDir, "db");
}

/**
 * Artifacts as files in `<data-dir>/artifacts` for an embedded database; with a URL, in Postgres
 * (no directory); with memory://, in a temporary directory like the database.
 */
export function defaultArtifactsDir(dataDir: string, database: string): string | undefined {
  if (isPostgresUrl(database) || database === "memory://") return undefined;
  return join(dataDir, "artifacts");
}

/**
 * The audit spool: `<data-dir>/audit-spool` for an embedded database. With a URL each replica
 * has its own folder in `<data-dir>/audit-spool/`, named by its listen address
 * (`…/127.0.0.1-8443`): stable across its restarts, so a crash never orphans its records, and
 * distinct between replicas on one host, which cannot listen on one address. Where the name is
 * not enough (port 0, hosts sharing the folder) the spool's lock decides: a replica finding its
 * folder held by a live one takes the next free numbered folder (…-0.2). Spools no live replica
 * holds are adopted (from sharedSpoolRoot).
 */
export function defaultAuditSpoolDir(
  dataDir: string,
  database: string,
  host: string,
  port: number,
): string | undefined {
  if (isPostgresUrl(database))
    return join(sharedSpoolRoot(dataDir), `${host.replace(/[^A-Za-z0-9.-]/g, "_")}-${port}`);
  if (database === "memory://") return undefined;
  return join(dataDir, "audit-spool");
}

/** Where replicas on a postgres:// database keep their spools by default, one folder each. */
export function sharedSpoolRoot(dataDir: string): string {
  return join(dataDir, "audit-spool");
}

/**
 * --secrets-key (and -previous), read. For an embedded database the key is at --secrets-key or,
 * without it, outside the data directory (defaultSecretsKeyPath), made there on the first start;
 * a key an earlier version made inside the data directory keeps working, with one warning saying
 * how to move it. None for memory:// or a postgres:// URL without the flag: the control plane
 * makes a key for the run, or refuses to start, naming the flag.
 */
export async function loadSecretsKeys(
  flags: ServeDataFlags,
  log: (line: string) => void = console.log,
  warn: (line: string) => void = console.warn,
): Promise<SecretsKeys | undefined> {
  const database = serveDatabase(flags);
  const embedded = !isPostgresUrl(database) && database !== "memory://";
  const previous = flags.secretsKeyPrevious
    ? await readSecretsKeyFile(flags.secretsKeyPrevious)
    : undefined;
  if (previous && !flags.secretsKey)
    throw new Error(
      "--secrets-key-previous needs --secrets-key: the key every secret is re-encrypted to",
    );
  if (!embedded)
    return flags.secretsKey
      ? { current: await readSecretsKeyFile(flags.secretsKey), previous }
      : undefined;
  const path = flags.secretsKey ?? defaultSecretsKeyPath();
  // Where versions before --data-dir made it: beside the embedded database.
  const oldPath = join(dirname(resolve(database)), "secrets.key");
  const opened = await openEmbeddedSecretsKey(path, oldPath);
  if (opened.moveTo)
    warn(
      `forelead: warning: the secrets key ${opened.path} is inside the data directory, so every ` +
        `backup of the data carries the key that opens its secrets; move it out while serve is ` +
        `stopped: mkdir -p -m 700 ${dirname(opened.moveTo)} && mv ${opened.path} ` +
        `${opened.moveTo}${flags.secretsKey ? "" : " (or name another place with --secrets-key)"}`,
    );
  if (opened.created)
    log(
      `forelead: created the secrets key ${opened.path} (mode 0600); back it up apart from ` +
        `the database: without it, job secrets and repository credentials cannot be read`,
    );
  return { current: opened.key, previous };
}

/**
 * Warns, once each, of artifacts or an audit spool that versions before --data-dir left beside an
 * embedded --database outside the data directory: serve no longer looks there, and says how to
 * keep using them.
 */
export function warnOfOldPlaces(
  flags: ServeDataFlags & { artifactsDir?: string; auditSpool?: string },
  warn: (line: string) => void = console.warn,
): void {
  const database = flags.database;
  if (!database || isPostgresUrl(database) || database === "memory://") return;
  const old = dirname(resolve(database));
  if (old === resolve(flags.dataDir)) return;
  const left = [
    ...(flags.artifactsDir ? [] : ["artifacts"]),
    ...(flags.auditSpool ? [] : ["audit-spool"]),
  ].filter((name) => existsSync(join(old, name)));
  for (const name of left)
    warn(
      `forelead: warning: ${join(old, name)} beside --database is where earlier versions kept ` +
        `${name === "artifacts" ? "artifacts" : "the audit spool"}; serve now keeps it in ` +
        `--data-dir (${join(flags.dataDir, name)}): start with --data-dir ${old} to keep using it`,
    );
}

/**
 * Binds each address for a moment and lets it go, so a busy port refuses the start before the
 * database, the secrets key or any other file is made. Port 0 always binds.
 */
export async function checkPortsFree(
  addresses: readonly { host: string; port: number; flag: string }[],
): Promise<void> {
  for (const { host, port, flag } of addresses) {
    if (port === 0) continue;
    const server = createServer();
    await new Promise<void>((ok, fail) => {
      server.once("error", (err: NodeJS.ErrnoException) =>
        fail(
          new Error(
            `${flag} ${host}:${port}: cannot listen there (${err.code ?? err.message})` +
              (err.code === "EADDRINUSE"
                ? "; another process holds the port: stop it or choose another port"
                : ""),
          ),
        ),
      );
      server.listen({ host, port, exclusive: true }, () => server.close(() => ok()));
    });
  }
}
