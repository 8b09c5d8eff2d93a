import { spawn } from "node:child_process";
import { mkdir, mkdtemp, readdir, rm } from "node:fs/promises";
import { createServer, type AddressInfo, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { adminActor } from "../support/actors.js";
import { startTestControlPlane } from "../support/control-plane.js";
import { createTestDatabase, databaseKind, type TestDatabase } from "../support/database.js";

const fixture = fileURLToPath(new URL("../support/failed-start.ts", import.meta.url));
/**
 * A bound on the child's whole run (two starts), not a timing assertion: past it, something kept
 * the process alive.
 */
const childBoundMs = 60_000;

describe(`a start that fails part way closes what it opened (${databaseKind})`, () => {
  let dir: string;
  let database: TestDatabase;
  let taken: Server;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "forelead-lifecycle-"));
    // Embedded: a directory, so the second start opens the very files the failed one had open.
    database =
      databaseKind === "embedded"
        ? { location: join(dir, "database"), kind: "embedded", drop: async () => {} }
        : await createTestDatabase();
    taken = createServer();
    await new Promise<void>((resolve) => taken.listen(0, "127.0.0.1", resolve));
  });
  afterAll(async () => {
    await new Promise((resolve) => taken?.close(resolve));
    await database?.drop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it(
    "a start on a port already in use fails naming the address; its process " +
      "then ends on its own, its temporary directories are gone, and the next " +
      "start on the same database serves",
    async () => {
      const scratch = join(dir, "tmp");
      await mkdir(scratch);
      const port = (taken.address() as AddressInfo).port;
      // The code host and the artifacts make their scratch directories under TMPDIR.
      const run = await runToEnd(
        process.execPath,
        ["--import", "tsx", fixture, String(port), database.location, database.kind],
        { ...process.env, TMPDIR: scratch },
      );
      expect(run.stderr).not.toMatch(/after a failed start/);
      expect(run.code, run.stderr).toBe(0);
      const result = JSON.parse(run.stdout.trim().split("\n").pop()!) as {
        failedStart?: string;
        secondStartUrl: string;
      };
      expect(result.failedStart).toMatch(new RegExp(`EADDRINUSE.*127\\.0\\.0\\.1:${port}`));
      expect(result.secondStartUrl).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
      // tsx keeps its compile cache there too; the control plane's directories are forelead-*.
      expect((await readdir(scratch)).filter((name) => name.startsWith("forelead-"))).toEqual([]);

      const cp = await startTestControlPlane({ database });
      const admin = await adminActor(cp);
      try {
        const enqueued = await admin.enqueue();
        expect(enqueued.status).toBe(200);
        expect((await admin.job(enqueued.json.job.id)).json.job.state).toBe("queued");
      } finally {
        await admin.close();
        await cp.close();
      }
    },
    childBoundMs + 30_000,
  );
});

/**
 * Runs a process until it exits by itself; fails (and kills it) if it is still running after
 * childBoundMs.
 */
function runToEnd(
  command: string,
  args: string[],
  env: NodeJS.ProcessEnv,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { env, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    const bound = setTimeout(() => {
      child.kill("SIGKILL");
      reject(
        new Error(
          `the process was still running ${childBoundMs} ms after it started: ` +
            `something it opened kept it alive\n${stdout}\n${stderr}`,
        ),
      );
    }, childBoundMs);
    child.once("error", reject);
    child.once("exit", (code) => {
      clearTimeout(bound);
      resolve({ code, stdout, stderr });
    });
  });
}
