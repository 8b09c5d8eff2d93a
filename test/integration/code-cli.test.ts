import { execFile } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { testAdminId } from "../support/control-plane.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";
import { createTestOrigin, type TestOrigin } from "../support/git-repos.js";

const repoRoot = resolve(import.meta.dirname, "../..");
const cp = useControlPlane();
let origin: TestOrigin;
let dir: string;

beforeAll(async () => {
  origin = await createTestOrigin();
  dir = await mkdtemp(join(tmpdir(), "forelead-cli-"));
  const admin = await cp.pki.client({ uris: [testAdminId] });
  await writeFile(join(dir, "ca.pem"), cp.pki.ca.certPem);
  await writeFile(join(dir, "admin.pem"), admin.certPem);
  await writeFile(join(dir, "admin-key.pem"), admin.keyPem, { mode: 0o600 });
});
afterAll(async () => {
  await origin?.remove();
  await rm(dir, { recursive: true, force: true });
});

/** Runs `forelead repos ...` with the admin certificate; resolves to exit code and output. */
function repos(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const flags = [
    "--server",
    cp.url,
    "--ca",
    join(dir, "ca.pem"),
    "--cert",
    join(dir, "admin.pem"),
    "--key",
    join(dir, "admin-key.pem"),
  ];
  return new Promise((done) => {
    execFile(
      process.execPath,
      ["bin/forelead.js", "repos", ...args, ...flags],
      { cwd: repoRoot },
      (err, stdout, stderr) => done({ code: err ? Number(err.code ?? 1) : 0, stdout, stderr }),
    );
  });
}

describe(`forelead repos (${databaseKind})`, () => {
  it(
    "repos add registers through the generated admin client; repos list " +
      "shows it; a refused registration exits 1 with the server's reason and " +
      "never echoes the credential",
    async () => {
      const added = await repos("add", "app", origin.path);
      expect(added, added.stderr).toMatchObject({ code: 0 });
      expect(added.stdout).toContain(`registered app at ${origin.path}`);
      const listed = await repos("list");
      expect(listed.stdout).toContain(`app\t${origin.path}`);
      const credFile = join(dir, "token");
      await writeFile(credFile, "tok-123\n", { mode: 0o600 });
      const refused = await repos("add", "local", origin.path, "--credential-file", credFile);
      expect(refused.code).toBe(1);
      expect(refused.stderr).toContain("is on a local path, which needs no credential");
      expect(refused.stderr + refused.stdout).not.toContain("tok-123");
    },
  );
});
