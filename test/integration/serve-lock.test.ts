// `forelead serve` as an operator starts it, on one embedded data directory:
// a second process is refused naming the first, SIGHUP re-reads the TLS files,
// a restart after SIGKILL takes the stale lock, and `npm start` stops on the
// SIGTERM its npm process gets. One data directory and PKI for the file.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { lockFileName } from "../../src/store/data-dir-lock.js";
import { eventually } from "../support/actors.js";
import { createRestClient } from "../support/clients.js";

const repoRoot = join(import.meta.dirname, "../..");
let dir: string;
const started: ChildProcess[] = [];

interface Serve {
  readonly child: ChildProcess;
  readonly output: () => string;
  readonly exited: Promise<number | null>;
}

/** Spawns `command args` in the test directory, capturing its output. */
function spawnServe(command: string, args: readonly string[], cwd = dir): Serve {
  const child = spawn(command, args, {
    cwd,
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, npm_config_update_notifier: "false" },
  });
  started.push(child);
  let text = "";
  child.stdout!.setEncoding("utf8").on("data", (c: string) => (text += c));
  child.stderr!.setEncoding("utf8").on("data", (c: string) => (text += c));
  const exited = new Promise<number | null>((resolve) =>
    child.once("exit", (code) => resolve(code)),
  );
  return { child, output: () => text, exited };
}

/**
 * Relative flags on purpose: the lock and the PKI must not depend on the working directory later.
 */
const serveArgs = [
  "serve",
  "--listen",
  "127.0.0.1:0",
  "--metrics-listen",
  "127.0.0.1:0",
  "--certs-dir",
  "certs",
  "--database",
  "data/db",
];
const forelead = (...args: string[]) =>
  spawnServe(process.execPath, [join(repoRoot, "bin/forelead.js"), ...args]);

async function serving(serve: Serve): Promise<string> {
  return eventually(
    "the serving line",
    async () => {
      if (serve.child.exitCode !== null)
        throw new Error(`serve exited ${serve.child.exitCode}:\n${serve.output()}`);
      return /forelead: serving (https:\/\/\S+) /.exec(serve.output())?.[1];
    },
    45_000,
  );
}

async function statusWithoutCertificate(url: string): Promise<number> {
  const ca = await readFile(join(dir, "certs/ca.pem"), "utf8");
  const client = createRestClient(url, ca);
  try {
    return (await client.request("GET", "/v1/runner/clock")).status;
  } finally {
    await client.close();
  }
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "forelead-lock-"));
});
afterAll(async () => {
  for (const c of started) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  await rm(dir, { recursive: true, force: true });
});

describe("one forelead serve per embedded data directory", () => {
  it(
    "a second serve on the same data directory exits 1 naming the first " +
      "(pid, start time); the first keeps serving and reloads on SIGHUP; after " +
      "SIGKILL of the first, `npm start` takes the stale lock, and SIGTERM to " +
      "npm stops the server",
    { timeout: 120_000 },
    async () => {
      const first = forelead(...serveArgs);
      const url = await serving(first);
      expect(first.output()).toMatch(
        /forelead: TLS certificate CN=localhost \(serial [0-9A-F]+, valid until \d{4}-/,
      );
      const lock = JSON.parse(await readFile(join(dir, "data/db", lockFileName), "utf8"));
      expect(lock).toMatchObject({ pid: first.child.pid, command: "forelead serve" });

      const second = forelead(...serveArgs);
      expect(await second.exited).toBe(1);
      expect(second.output()).toContain(
        `${join(dir, "data/db")} is in use by forelead serve (pid ` +
          `${first.child.pid}, started ${lock.startedAt}); stop it or use another ` +
          `--database`,
      );
      expect(second.output()).not.toContain("serving");
      const status = await statusWithoutCertificate(url);
      expect(status).toBeGreaterThan(0); // answered over TLS: the first still serves

      first.child.kill("SIGHUP");
      await eventually("the SIGHUP line", async () =>
        first.output().includes("SIGHUP: the TLS files are unchanged; still serving CN=localhost")
          ? true
          : undefined,
      );
      expect(first.child.exitCode).toBeNull();

      first.child.kill("SIGKILL");
      await first.exited;
      // The lock file is still there, naming a dead process.
      expect(JSON.parse(await readFile(join(dir, "data/db", lockFileName), "utf8")).pid).toBe(
        first.child.pid,
      );

      // npm runs the start script in the package directory: absolute paths.
      const npm = spawnServe(
        "npm",
        [
          "start",
          "--",
          "--listen",
          "127.0.0.1:0",
          "--certs-dir",
          join(dir, "certs"),
          "--database",
          join(dir, "data/db"),
        ],
        repoRoot,
      );
      const restartedUrl = await serving(npm);
      expect(await statusWithoutCertificate(restartedUrl)).toBeGreaterThan(0);
      const serverPid = JSON.parse(await readFile(join(dir, "data/db", lockFileName), "utf8"))
        .pid as number;
      expect(serverPid).not.toBe(first.child.pid);
      npm.child.kill("SIGTERM");
      await npm.exited;
      await eventually(
        `the server (pid ${serverPid}) to exit after SIGTERM to npm`,
        async () => (alive(serverPid) ? undefined : true),
        20_000,
      );
      expect(npm.output()).toContain("SIGTERM received; closing connections and the database");
      // A clean exit releases the lock.
      await expect(readFile(join(dir, "data/db", lockFileName), "utf8")).rejects.toThrow(/ENOENT/);
    },
  );
});
