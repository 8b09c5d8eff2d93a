// Where `forelead serve` keeps its files: everything it makes inside --data-dir, the secrets key
// outside it (an old key inside it keeps working, with one warning), and nothing at all made when
// its port is busy.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdir, mkdtemp, readdir, rename, rm, stat } from "node:fs/promises";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readOrCreateSecretsKeyFile } from "../../src/secrets/key-file.js";
import { createTestDatabase, databaseKind } from "../support/database.js";

const forelead = join(import.meta.dirname, "../../bin/forelead.js");
let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "forelead-serve-data-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

interface Ran {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/**
 * Runs `forelead serve ...args` with its config home at `xdg`; once it prints its serving line
 * (or exits), stops it with SIGTERM and returns what it printed.
 */
async function serve(args: readonly string[], xdg: string): Promise<Ran> {
  const child: ChildProcess = spawn(
    process.execPath,
    [forelead, "serve", "--listen", "127.0.0.1:0", "--metrics-listen", "off", ...args],
    {
      cwd: dir,
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, XDG_CONFIG_HOME: xdg },
    },
  );
  let stdout = "";
  let stderr = "";
  child.stdout!.setEncoding("utf8").on("data", (c: string) => {
    stdout += c;
    if (/forelead: serving /.test(stdout)) child.kill("SIGTERM");
  });
  child.stderr!.setEncoding("utf8").on("data", (c: string) => (stderr += c));
  const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
  return { code, stdout, stderr };
}

/** Every file under `root`, relative to it. */
async function filesUnder(root: string): Promise<string[]> {
  return (await readdir(root, { recursive: true })).map(String);
}

describe("serve --data-dir and the secrets key", { timeout: 120_000 }, () => {
  it("a fresh serve makes the key outside the data directory (0600, a private directory) and its other files inside it", async () => {
    const data = join(dir, "fresh");
    const xdg = join(dir, "fresh-xdg");
    const ran = await serve(["--data-dir", data, "--certs-dir", join(dir, "fresh-certs")], xdg);
    expect(ran.stderr).toBe("");
    const key = join(xdg, "forelead", "secrets.key");
    expect(ran.stdout).toContain(`created the secrets key ${key} (mode 0600)`);
    expect((await stat(key)).mode & 0o777).toBe(0o600);
    expect((await stat(join(xdg, "forelead"))).mode & 0o022).toBe(0);
    const files = await filesUnder(data);
    expect(files.filter((f) => f.includes("secrets.key"))).toEqual([]);
    expect(files).toEqual(expect.arrayContaining(["db", "artifacts", "audit-spool"]));
    expect(ran.stdout).toContain(`artifacts in files in ${join(data, "artifacts")}`);
    expect(await filesUnder(dir)).not.toContain("data");
  });

  it("a key an earlier version made inside the data directory is used, with one warning saying how to move it", async () => {
    const data = join(dir, "upgraded");
    const xdg = join(dir, "upgraded-xdg");
    await mkdir(data, { recursive: true, mode: 0o700 });
    await readOrCreateSecretsKeyFile(join(data, "secrets.key"));
    const args = ["--data-dir", data, "--certs-dir", join(dir, "upgraded-certs")];
    const ran = await serve(args, xdg);
    expect(ran.stdout).toContain("forelead: serving ");
    expect(ran.stdout).not.toContain("created the secrets key");
    const warnings = ran.stderr.split("\n").filter((l) => l.includes("warning"));
    expect(warnings).toEqual([
      `forelead: warning: the secrets key ${join(data, "secrets.key")} is inside the data ` +
        `directory, so every backup of the data carries the key that opens its secrets; move ` +
        `it out while serve is stopped: mkdir -p -m 700 ${join(xdg, "forelead")} && mv ` +
        `${join(data, "secrets.key")} ${join(xdg, "forelead", "secrets.key")} (or name ` +
        `another place with --secrets-key)`,
    ]);
    await expect(stat(join(xdg, "forelead", "secrets.key"))).rejects.toThrow(/ENOENT/);
    // Once moved, the next start reads it there and warns no more.
    await mkdir(join(xdg, "forelead"), { recursive: true, mode: 0o700 });
    await rename(join(data, "secrets.key"), join(xdg, "forelead", "secrets.key"));
    const again = await serve(args, xdg);
    expect(again.stdout).toContain("forelead: serving ");
    expect(again.stdout).not.toContain("created the secrets key");
    expect(again.stderr).toBe("");
  });

  it("artifacts an earlier version kept beside --database are named with how to keep using them", async () => {
    const old = join(dir, "old-layout");
    await mkdir(join(old, "artifacts"), { recursive: true });
    const ran = await serve(
      [
        "--database",
        join(old, "db"),
        "--data-dir",
        join(dir, "new-layout"),
        "--certs-dir",
        join(dir, "old-certs"),
      ],
      join(dir, "old-xdg"),
    );
    expect(ran.stdout).toContain("forelead: serving ");
    expect(ran.stderr.trim()).toBe(
      `forelead: warning: ${join(old, "artifacts")} beside --database is where earlier ` +
        `versions kept artifacts; serve now keeps it in --data-dir ` +
        `(${join(dir, "new-layout", "artifacts")}): start with --data-dir ${old} to keep using it`,
    );
  });

  it("a busy port refuses the start before any database, key or file is made", async () => {
    const busy: Server = createServer();
    await new Promise<void>((ok) => busy.listen(0, "127.0.0.1", ok));
    const port = (busy.address() as { port: number }).port;
    try {
      const data = join(dir, "busy");
      const xdg = join(dir, "busy-xdg");
      const ran = await serve(
        ["--listen", `127.0.0.1:${port}`, "--data-dir", data, "--certs-dir", join(data, "certs")],
        xdg,
      );
      expect(ran.code).not.toBe(0);
      expect(ran.stderr).toContain(
        `--listen 127.0.0.1:${port}: cannot listen there (EADDRINUSE); another process holds ` +
          `the port: stop it or choose another port`,
      );
      await expect(stat(data)).rejects.toThrow(/ENOENT/);
      await expect(stat(xdg)).rejects.toThrow(/ENOENT/);
    } finally {
      await new Promise((ok) => busy.close(ok));
    }
  });
});

describe.skipIf(databaseKind !== "postgres")(
  "serve --data-dir with a postgres:// database",
  { timeout: 120_000 },
  () => {
    it("keeps the audit spool in the data directory, not the working directory's data/", async () => {
      const database = await createTestDatabase();
      try {
        const key = join(dir, "pg-secrets.key");
        await readOrCreateSecretsKeyFile(key);
        const data = join(dir, "pg-data");
        const ran = await serve(
          [
            "--database",
            database.location,
            "--secrets-key",
            key,
            "--data-dir",
            data,
            "--certs-dir",
            join(dir, "pg-certs"),
          ],
          join(dir, "pg-xdg"),
        );
        expect(ran.stdout).toContain(
          `audit spool ${join(data, "audit-spool", "127.0.0.1-0", "audit-spool.ndjson")}`,
        );
        expect(await filesUnder(data)).toContain("audit-spool");
        await expect(stat(join(dir, "data"))).rejects.toThrow(/ENOENT/);
      } finally {
        await database.drop();
      }
    });
  },
);
