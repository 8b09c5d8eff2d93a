import { existsSync } from "node:fs";
import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import {
  jobSecretsProblem,
  removeLeftoverSecretFiles,
  writeSecretFiles,
} from "../../src/runner/executors/secret-files.js";

const made: string[] = [];
afterEach(async () => {
  for (const dir of made.splice(0)) await rm(dir, { recursive: true, force: true });
});
async function jobsDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "forelead-jobs-"));
  made.push(dir);
  return dir;
}

describe("secret files of a job", () => {
  it("are written to a private directory (0700) as files of mode 0400, and removed on request", async () => {
    const jobs = await jobsDir();
    const written = (await writeSecretFiles(
      { "key.pem": "KEY\n", token: "t0k3n" },
      join(jobs, "job-1"),
    ))!;
    made.push(written.dir);
    expect((await stat(written.dir)).mode & 0o777).toBe(0o700);
    expect((await stat(join(written.dir, "key.pem"))).mode & 0o777).toBe(0o400);
    expect(await readFile(join(written.dir, "token"), "utf8")).toBe("t0k3n");
    // tmpfs: never on a disk
    if (existsSync("/dev/shm")) expect(written.dir.startsWith("/dev/shm/")).toBe(true);
    await written.remove();
    expect(existsSync(written.dir)).toBe(false);
  });

  it("none: no directory at all", async () => {
    expect(await writeSecretFiles({}, join(await jobsDir(), "job-1"))).toBeUndefined();
  });

  it("a name that is not one path segment is refused before anything is written, naming the file", async () => {
    await expect(
      writeSecretFiles({ ok: "x", "../escape": "secret-content" }, join(await jobsDir(), "job-1")),
    ).rejects.toThrow(/secret file name "\.\.\/escape"/);
  });

  it("leftovers of a runner that died are removed at its next start, and no other runner's", async () => {
    const mine = await jobsDir();
    const other = await jobsDir();
    const left = (await writeSecretFiles({ a: "1" }, join(mine, "job-1")))!;
    const theirs = (await writeSecretFiles({ a: "1" }, join(other, "job-2")))!;
    made.push(left.dir, theirs.dir);
    expect(await removeLeftoverSecretFiles(mine)).toEqual([left.dir]);
    expect(existsSync(left.dir)).toBe(false);
    expect(existsSync(theirs.dir)).toBe(true);
  });
});

describe("secrets a process cannot be given", () => {
  it("name the variable or file, never the value", () => {
    expect(jobSecretsProblem({ env: { TOKEN: "fine" }, files: { "a.pem": "x" } })).toBeUndefined();
    const nul = jobSecretsProblem({ env: { TOKEN: "abc\u0000defsecret" }, files: {} });
    expect(nul).toMatch(/secret TOKEN holds NUL/);
    expect(nul).not.toContain("defsecret");
    expect(jobSecretsProblem({ env: { "A=B": "v" }, files: {} })).toMatch(/"A=B"/);
    expect(jobSecretsProblem({ env: {}, files: { "a/b": "v" } })).toMatch(/"a\/b"/);
  });
});
