// `forelead runner` for autoscaling and honest identity (issue 18), as real
// child processes against a real control plane: --once takes one job and
// exits, --idle-exit exits after idling, a second process of one runner
// identity is refused (409) while the first is live, a register that changes
// a live runner is audited, and a CA bundle that does not sign the server's
// certificate stops the runner at once naming the file.
import { spawn, type ChildProcess } from "node:child_process";
import { chmod, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { eventually, registeredRunner } from "../support/actors.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";
import { createTestPki } from "../support/pki.js";
import { runnerCertificateFiles, specFor } from "../support/runner-agent.js";

// Leases of 2 s: a stopped runner is silent for its lease length in test time.
const cp = useControlPlane({ leaseSeconds: 2, sweepIntervalMs: 100 });
const { admin } = cp;
const repoRoot = join(import.meta.dirname, "../..");
const children: ChildProcess[] = [];
let scratch: string;
let n = 0;

beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), "forelead-runner-once-"));
  await chmod(scratch, 0o755); // process jobs run as users of their own
});
afterAll(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  if (scratch) await rm(scratch, { recursive: true, force: true });
});

interface RunnerProcess {
  readonly child: ChildProcess;
  output(): string;
  readonly exited: Promise<number | null>;
}

/** `forelead runner` as an operator starts it, with certificate files for `runnerId`. */
function spawnRunner(
  files: { ca: string; cert: string; key: string },
  extra: string[] = [],
): RunnerProcess {
  const args = [
    "bin/forelead.js",
    "runner",
    "--server",
    cp.url,
    "--ca",
    files.ca,
    "--cert",
    files.cert,
    "--key",
    files.key,
    "--executor",
    "process",
    "--labels",
    "linux",
    "--work-dir",
    join(scratch, `work-${++n}`),
    "--grace-seconds",
    "1",
    ...extra,
  ];
  const child = spawn(process.execPath, args, { cwd: repoRoot, stdio: ["ignore", "pipe", "pipe"] });
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

/** Resolves true once the runner registered, false when it exited first. */
async function registers(runner: RunnerProcess): Promise<boolean> {
  let exited = false;
  void runner.exited.then(() => (exited = true));
  return eventually(
    "the runner to register or exit",
    async () =>
      runner.output().includes("registered as runner") ? true : exited ? false : undefined,
    60_000,
  );
}

async function jobsOf(workspaceId: string): Promise<Array<Record<string, unknown>>> {
  const reply = await admin.rest.request(
    "GET",
    `/v1/admin/jobs?workspaceId=${workspaceId}&pageSize=100`,
  );
  expect(reply.status, reply.text).toBe(200);
  return reply.json.jobs;
}

async function auditActions(action: string): Promise<Array<Record<string, string>>> {
  const reply = await admin.rest.request("GET", "/v1/admin/audit?kind=action&pageSize=1000");
  expect(reply.status, reply.text).toBe(200);
  return (reply.json.records as Array<Record<string, string>>).filter((r) => r.action === action);
}

describe(`forelead runner --once and --idle-exit (${databaseKind})`, () => {
  it(
    "--once with 2 slots settles exactly one job of three queued and exits 0, though the job failed",
    { timeout: 90_000 },
    async () => {
      const ws = "once1";
      for (let i = 0; i < 3; i++) {
        const reply = await admin.enqueue({
          workspaceId: ws,
          spec: specFor("process", { argv: ["sh", "-c", "echo once; exit 2"] }),
        });
        expect(reply.status, reply.text).toBe(200);
      }
      const runner = spawnRunner(await runnerCertificateFiles(cp, "once1", ws, scratch), [
        "--once",
        "--slots",
        "2",
      ]);
      expect(await runner.exited, runner.output()).toBe(0);
      const jobs = await jobsOf(ws);
      expect(jobs.map((j) => j.state).sort()).toEqual(["failed", "queued", "queued"]);
      expect(jobs.find((j) => j.state === "failed")).toMatchObject({ exitCode: 2, attempts: 1 });
      expect(runner.output().match(/claimed job /g)).toHaveLength(1);
      expect(runner.output()).toContain("stopped (job-limit; 1 job(s) claimed, 1 settled; exit 0)");
    },
  );

  it(
    "--idle-exit 2s exits 0 after idling; --once that gets no job before --idle-exit exits 3",
    { timeout: 90_000 },
    async () => {
      const files = await runnerCertificateFiles(cp, "idle1", "idle1", scratch);
      const idle = spawnRunner(files, ["--idle-exit", "2s"]);
      expect(await idle.exited, idle.output()).toBe(0);
      expect(idle.output()).toContain("no job for 2 s (--idle-exit); stopping");
      const once = spawnRunner(await runnerCertificateFiles(cp, "idle2", "idle1", scratch), [
        "--once",
        "--idle-exit",
        "1s",
      ]);
      expect(await once.exited, once.output()).toBe(3);
      expect(once.output()).toContain("stopped (idle; 0 job(s) claimed, 0 settled; exit 3)");
      const bad = spawnRunner(files, ["--idle-exit", "soon"]);
      expect(await bad.exited).toBe(1);
      expect(bad.output()).toContain(
        '--idle-exit must be a duration of at least 1s: a number and a unit (s, m, h or d), e.g. 30s or 5m; got "soon"',
      );
    },
  );
});

describe(`one live process per runner identity (${databaseKind})`, () => {
  it(
    "a second process is refused naming the first's start time while the " +
      "first works on; it is accepted once the first stopped and its lease " +
      "length passed",
    { timeout: 120_000 },
    async () => {
      const ws = "dup1";
      const files = await runnerCertificateFiles(cp, "dup1", ws, scratch);
      const first = spawnRunner(files);
      expect(await registers(first), first.output()).toBe(true);
      const [, instance, startedAt] =
        /registered as runner "dup1" in workspace "dup1" \(instance (\S+) started (\S+),/.exec(
          first.output(),
        ) ?? [];
      expect(instance).toBeDefined();

      const second = spawnRunner(files);
      expect(await second.exited, second.output()).toBe(6);
      expect(second.output()).toContain(
        `forelead runner: cannot start: runner "dup1" in workspace "dup1" is ` +
          `already running as instance ${instance} (started ${startedAt}, last ` +
          `heard from `,
      );
      expect(second.output()).not.toContain("retrying");
      const denied = (await auditActions("runner.register")).filter(
        (r) => r.decision === "deny" && r.target === 'runner "dup1" in workspace "dup1"',
      );
      expect(denied).toEqual([
        expect.objectContaining({
          reason: expect.stringContaining(
            `already running as instance ${instance} (started ${startedAt}`,
          ),
        }),
      ]);

      // The first keeps claiming and running jobs.
      const jobId = (
        await admin.enqueue({ workspaceId: ws, spec: specFor("process", { argv: ["true"] }) })
      ).json.job.id;
      await eventually(
        `job ${jobId} to succeed on the first runner`,
        async () => ((await admin.job(jobId)).json.job.state === "succeeded" ? true : undefined),
        30_000,
      );

      first.child.kill("SIGTERM");
      expect(await first.exited).toBe(0);
      // As a supervisor restarts it: refused (6) until the first has been silent for the lease
      // length. Bounded by time, not by a count of attempts: a refused start takes ~0.2 s on a
      // quiet machine, so ten of them ended before the 2 s had passed.
      let accepted: RunnerProcess | undefined;
      for (const deadline = Date.now() + 30_000; Date.now() < deadline && !accepted;) {
        const again = spawnRunner(files);
        if (await registers(again)) accepted = again;
        else expect(await again.exited, again.output()).toBe(6);
      }
      expect(accepted, "a later process to be accepted").toBeDefined();
      accepted!.child.kill("SIGTERM");
      expect(await accepted!.exited).toBe(0);
    },
  );

  it(
    "a register that changes a live runner's slots or labels is applied and " +
      "audited old → new; another instance is refused with 409",
    async () => {
      const runner = await registeredRunner(cp, "chg1", "chg1");
      try {
        const changed = await runner.register({ slots: 3, labels: ["linux", "gpu"] });
        expect(changed.status, changed.text).toBe(200);
        const listed = await admin.rest.request("GET", "/v1/admin/runners?workspaceId=chg1");
        expect(listed.json.runners).toEqual([
          expect.objectContaining({ runnerId: "chg1", slots: 3, labels: ["gpu", "linux"] }),
        ]);
        expect(
          (await auditActions("runner.register")).filter(
            (r) => r.target === 'runner "chg1" in workspace "chg1"',
          ),
        ).toEqual([
          expect.objectContaining({
            decision: "allow",
            reason:
              "registration changed while the runner was live: slots 1 → 3, labels linux → gpu,linux",
          }),
        ]);
        // The same registration again changes nothing and is not audited again.
        expect((await runner.register({ slots: 3, labels: ["linux", "gpu"] })).status).toBe(200);
        expect(
          await auditActions("runner.register").then((r) =>
            r.filter((x) => x.target === 'runner "chg1" in workspace "chg1"'),
          ),
        ).toHaveLength(1);

        const other = await runner.register({
          instanceId: "other-process",
          instanceStartedAt: new Date().toISOString(),
        });
        expect(other.status, other.text).toBe(409);
        expect(other.json).toMatchObject({
          code: "already_exists",
          message: expect.stringContaining(
            'runner "chg1" in workspace "chg1" is already running as a process that sent no instance id',
          ),
        });
        const bad = await runner.register({ instanceId: "no spaces" });
        expect(bad.status).toBe(400);
        expect(bad.json.message).toContain('instanceId "no spaces" is not an instance id');
      } finally {
        await runner.close();
      }
    },
  );
});

describe(`a runner that cannot verify the control plane (${databaseKind})`, () => {
  it(
    "a --ca that did not sign the server's certificate stops the runner at once (exit 5) naming the CA file",
    { timeout: 60_000 },
    async () => {
      const files = await runnerCertificateFiles(cp, "ca1", "ca1", scratch);
      const otherCa = join(scratch, "other-ca.pem");
      await writeFile(otherCa, (await createTestPki()).ca.certPem);
      const runner = spawnRunner({ ...files, ca: otherCa });
      expect(await runner.exited, runner.output()).toBe(5);
      expect(runner.output()).toContain(
        `forelead runner: cannot start: cannot verify the control plane at ` +
          `${new URL(cp.url).origin}: its certificate is not signed by the CA ` +
          `bundle --ca ${otherCa} (`,
      );
      expect(runner.output()).toContain(
        "give --ca the CA certificate that signed the control plane's certificate",
      );
      expect(runner.output()).not.toContain("retrying");
    },
  );
});
