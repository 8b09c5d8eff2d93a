// `forelead runner` as the README starts it: relative paths, from its own
// working directory. The checkout job's bundle is fetched into the job's
// directory under a relative --work-dir; a second runner on the same
// --state-dir is refused naming the first.
import { spawn, type ChildProcess } from "node:child_process";
import { chmod, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { eventually } from "../support/actors.js";
import { registerRepository } from "../support/code-actors.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";
import { createTestOrigin, type TestOrigin } from "../support/git-repos.js";
import { specFor } from "../support/runner-agent.js";

const repoRoot = join(import.meta.dirname, "../..");
const cp = useControlPlane();
const { admin } = cp;
let origin: TestOrigin;
let dir: string;
const children: ChildProcess[] = [];

beforeAll(async () => {
  origin = await createTestOrigin();
  expect((await registerRepository(admin, "app", origin.path)).status).toBe(200);
  dir = await mkdtemp(join(tmpdir(), "forelead-runner-paths-"));
  await chmod(dir, 0o755); // process jobs run as users of their own
  const issued = await cp.pki.runner("rp1", "wp1");
  await mkdir(join(dir, "state"), { mode: 0o700 });
  await writeFile(join(dir, "ca.pem"), cp.pki.ca.certPem);
  await writeFile(join(dir, "state/cert.pem"), issued.certPem, { mode: 0o600 });
  await writeFile(join(dir, "state/key.pem"), issued.keyPem, { mode: 0o600 });
});
afterAll(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  await origin?.remove();
  if (dir) await rm(dir, { recursive: true, force: true });
});

function runner(): { child: ChildProcess; output: () => string; exited: Promise<number | null> } {
  const args = [
    join(repoRoot, "bin/forelead.js"),
    "runner",
    "--server",
    cp.url,
    "--ca",
    "ca.pem",
    "--state-dir",
    "state",
    "--executor",
    "process",
    "--labels",
    "linux",
    "--work-dir",
    "data/runner",
    "--grace-seconds",
    "1",
  ];
  const child = spawn(process.execPath, args, { cwd: dir, stdio: ["ignore", "pipe", "pipe"] });
  children.push(child);
  let text = "";
  child.stdout!.on("data", (c) => (text += c));
  child.stderr!.on("data", (c) => (text += c));
  return {
    child,
    output: () => text,
    exited: new Promise((resolve) => child.once("exit", (code) => resolve(code))),
  };
}

describe(`forelead runner with relative paths (${databaseKind})`, () => {
  it(
    "a relative --work-dir runs a checkout job; a second runner on the same --state-dir exits 1 naming the first",
    { timeout: 90_000 },
    async () => {
      const commit = await origin.commit("paths", { "marker.txt": "relative\n" });
      const first = runner();
      await eventually(
        "the runner to register",
        async () => (first.output().includes("registered as runner") ? true : undefined),
        30_000,
      );
      const second = runner();
      expect(await second.exited).toBe(1);
      expect(second.output()).toContain(
        `${join(dir, "state")} is in use by forelead runner (pid ${first.child.pid}, started `,
      );

      const reply = await admin.enqueue({
        workspaceId: "wp1",
        spec: specFor("process", { argv: ["cat", "workspace/marker.txt"] }),
        repository: "app",
        targetBranch: "paths",
      });
      expect(reply.status, reply.text).toBe(200);
      const job = await eventually(
        "the checkout job to settle",
        async () => {
          const j = (await admin.job(reply.json.job.id)).json.job;
          return ["succeeded", "failed", "cancelled"].includes(j.state) ? j : undefined;
        },
        45_000,
      );
      expect(job, JSON.stringify(job)).toMatchObject({
        state: "succeeded",
        kind: "checkout",
        baseCommit: commit,
        exitCode: 0,
      });
      first.child.kill("SIGTERM");
      expect(await first.exited).toBe(0);
    },
  );
});
