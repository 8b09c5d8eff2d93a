import { execFile } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const run = promisify(execFile);
const script = fileURLToPath(new URL("../../scripts/ci/postgres.sh", import.meta.url));

/**
 * A Postgres server of the test's own (scripts/ci/postgres.sh in a temporary directory), to stop
 * and start under a running control plane.
 */
export interface PostgresServer {
  /**
   * Its database's URL, with a password that the server (trust auth) ignores, so logs can be
   * checked for it.
   */
  readonly url: string;
  readonly port: number;
  /** `pg_ctl stop -m fast`: every connection is terminated; the data stays. */
  stop(): Promise<void>;
  /** Starts it again on the same port; resolves once it accepts connections. */
  start(): Promise<void>;
  /** Stops it and removes its directory. */
  destroy(): Promise<void>;
}

/**
 * True when Postgres server binaries are installed (what scripts/ci/postgres.sh looks for, without
 * installing them).
 */
export function postgresServerInstalled(): boolean {
  const onPath = (process.env.PATH ?? "")
    .split(":")
    .some((dir) => dir && existsSync(join(dir, "initdb")) && existsSync(join(dir, "pg_ctl")));
  const versions = existsSync("/usr/lib/postgresql") ? readdirSync("/usr/lib/postgresql") : [];
  return onPath || versions.some((v) => existsSync(`/usr/lib/postgresql/${v}/bin/pg_ctl`));
}

/** Starts a throwaway server in a fresh temporary directory. */
export async function startPostgresServer(): Promise<PostgresServer> {
  const dir = await mkdtemp(join(tmpdir(), "fl-pg-"));
  const { stdout } = await run("bash", [script, "start", dir]);
  const url = new URL(stdout.trim());
  url.password = "unused-secret";
  const port = Number(url.port);
  const pgCtl = join(readFileSync(join(dir, "bindir"), "utf8").trim(), "pg_ctl");
  // Postgres refuses to run as root: the script then runs it as this OS user.
  const asServerUser = (argv: string[]) =>
    process.getuid?.() === 0
      ? run("runuser", ["-u", process.env.FORELEAD_PG_OS_USER ?? "postgres", "--", ...argv])
      : run(argv[0]!, argv.slice(1));
  return {
    url: url.toString(),
    port,
    stop: async () =>
      void (await asServerUser([
        pgCtl,
        "stop",
        "-D",
        join(dir, "data"),
        "-m",
        "fast",
        "-w",
        "-t",
        "30",
      ])),
    // The port stays claimed for dir while it is stopped (scripts/ci/postgres.sh): no other server
    // takes it.
    start: async () => void (await run("bash", [script, "start", dir])),
    destroy: async () => void (await run("bash", [script, "stop", dir])),
  };
}
