import { execFile } from "node:child_process";
import { mkdtemp, readFile, stat } from "node:fs/promises";
import { userInfo } from "node:os";
import { promisify } from "node:util";

const run = promisify(execFile);

/** A Postgres server of the test's own (scripts/ci/postgres.sh), which the test may stop and start again. */
export interface PostgresServer {
  readonly url: string;
  /** Stops the server (pg_ctl stop -m fast); its data stays. */
  stop(): Promise<void>;
  /** Starts it again on the same port. */
  start(): Promise<void>;
  /** Stops it and removes its directory. */
  remove(): Promise<void>;
}

/**
 * Starts a throwaway Postgres in a fresh directory, or says why it cannot
 * (no server binaries and not root to install them).
 */
export async function startPostgresServer(): Promise<PostgresServer | { readonly unavailable: string }> {
  const dir = await mkdtemp("/tmp/forelead-pg-");
  const script = "scripts/ci/postgres.sh";
  let url: string;
  try {
    url = (await run("bash", [script, "start", dir])).stdout.trim();
  } catch (err) {
    await run("bash", [script, "stop", dir]).catch(() => {});
    return { unavailable: `scripts/ci/postgres.sh could not start a Postgres server: ${(err as { stderr?: string }).stderr?.trim().split("\n").pop() ?? (err as Error).message}` };
  }
  const bindir = (await readFile(`${dir}/bindir`, "utf8")).trim();
  const port = (await readFile(`${dir}/port`, "utf8")).trim();
  const owner = (await stat(`${dir}/data`)).uid;
  // The script runs the server as the postgres OS user when we are root.
  const asOwner = (args: string[]) => (owner === process.getuid?.() ? run(args[0]!, args.slice(1)) : run("runuser", ["-u", ownerName(owner), "--", ...args]));
  const pgCtl = (...args: string[]) => asOwner([`${bindir}/pg_ctl`, "-D", `${dir}/data`, ...args]);
  return {
    url,
    stop: async () => void (await pgCtl("stop", "-m", "fast", "-w", "-t", "30")),
    start: async () => void (await pgCtl("start", "-w", "-t", "30", "-l", `${dir}/postgres.log`, "-o", `-p ${port}`)),
    remove: async () => void (await run("bash", [script, "stop", dir])),
  };
}

function ownerName(uid: number): string {
  if (uid === userInfo().uid) return userInfo().username;
  return process.env.FORELEAD_PG_OS_USER ?? "postgres";
}
