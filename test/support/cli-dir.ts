import { execFile } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll } from "vitest";
import type { ControlPlaneFixture } from "./fixture.js";

const run = promisify(execFile);
/** The `forelead` command of this checkout. */
export const foreleadBin = join(process.cwd(), "bin/forelead.js");

/** What a `forelead` process did: its exit code (-1 when it was killed) and its output. */
export interface CliResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/**
 * A temporary directory for a suite's `forelead` commands, holding the test CA and the
 * test-admin's certificate (ca.pem, admin.pem, admin-key.pem), made in beforeAll and removed
 * in afterAll. `forel(args)` runs the command there; `connection()` is the flags that reach `cp`
 * with those files.
 */
export function useCliDir(cp: ControlPlaneFixture, name: string) {
  let dir = "";
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), `forelead-${name}-`));
    const cert = await cp.pki.service("test-admin");
    await writeFile(join(dir, "ca.pem"), cp.pki.ca.certPem);
    await writeFile(join(dir, "admin.pem"), cert.certPem);
    await writeFile(join(dir, "admin-key.pem"), cert.keyPem);
  });
  afterAll(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });
  return {
    dir: () => dir,
    connection: () => [
      "--server",
      cp.url,
      "--cert",
      "admin.pem",
      "--key",
      "admin-key.pem",
      "--ca",
      "ca.pem",
    ],
    /** Runs `forelead ...args` in the directory; `env` adds to (and overrides) this process's. */
    async forel(args: readonly string[], env: NodeJS.ProcessEnv = {}): Promise<CliResult> {
      try {
        const { stdout, stderr } = await run(process.execPath, [foreleadBin, ...args], {
          cwd: dir,
          env: { ...process.env, ...env },
          timeout: 60_000,
          encoding: "utf8",
        });
        return { code: 0, stdout, stderr };
      } catch (err) {
        const e = err as { code?: number; stdout?: string; stderr?: string };
        return {
          code: typeof e.code === "number" ? e.code : -1,
          stdout: e.stdout ?? "",
          stderr: e.stderr ?? "",
        };
      }
    },
  };
}
