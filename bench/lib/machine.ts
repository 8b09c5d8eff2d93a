import os from "node:os";
import pg from "pg";
import { parentPid } from "./cpu.js";

/** The machine a result was measured on: results are only comparable within one machine. */
export interface Machine {
  readonly cpuModel: string;
  readonly cores: number;
  readonly memoryBytes: number;
  readonly os: string;
  readonly node: string;
  /** `server_version` of the Postgres behind DATABASE_URL, or the embedded database's. */
  readonly postgres: string;
  /**
   * 1, 5 and 15 minute load averages when the scenario ended: other work on the machine skews every
   * figure.
   */
  readonly loadAverage: readonly number[];
}

/** Describes this machine and the database the benchmark talks to. */
export async function describeMachine(databaseUrl: string | undefined): Promise<Machine> {
  return {
    cpuModel: os.cpus()[0]?.model ?? "unknown",
    cores: os.cpus().length,
    memoryBytes: os.totalmem(),
    os: `${os.type()} ${os.release()} ${os.arch()}`,
    node: process.version,
    postgres: databaseUrl ? await serverVersion(databaseUrl) : "embedded PGlite 0.4.6 (no server)",
    loadAverage: os.loadavg().map((l) => Math.round(l * 100) / 100),
  };
}

/**
 * The postmaster of the server at `url` when it runs on this machine (Linux), so its CPU can be
 * measured.
 */
export async function postmasterPid(url: string | undefined): Promise<number | undefined> {
  if (!url || process.platform !== "linux") return undefined;
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<{ pid: number }>("select pg_backend_pid() as pid");
    const parent = parentPid(rows[0]!.pid);
    return parent && parent > 1 ? parent : undefined;
  } finally {
    await client.end();
  }
}

async function serverVersion(url: string): Promise<string> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<{ v: string; fsync: string; sc: string }>(
      "select current_setting('server_version') as v, current_setting('fsync') " +
        "as fsync, current_setting('synchronous_commit') as sc",
    );
    const r = rows[0]!;
    return `PostgreSQL ${r.v} (fsync ${r.fsync}, synchronous_commit ${r.sc})`;
  } finally {
    await client.end();
  }
}
