import "reflect-metadata";
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { chmod, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { basename, dirname, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createDockerClient } from "../../src/runner/executors/docker-api.js";
import { containerName } from "../../src/runner/executors/names.js";
import { killUid, processesOf } from "../../src/runner/executors/proc.js";
import { probeIsolation } from "../../src/runner/executors/isolation.js";
import { adminActor, eventually } from "../support/actors.js";
import { startTestControlPlane, type TestControlPlane } from "../support/control-plane.js";
import { createTestDatabase, databaseKind, type TestDatabase } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";
import {
  executorsUnderTest,
  runnerCertificateFiles,
  specFor,
  startTestRunner,
  type ExecutorKind,
} from "../support/runner-agent.js";

// Leases of 2 s swept every 100 ms: a dead runner's lease runs out in test time.
const cp = useControlPlane({ leaseSeconds: 2, sweepIntervalMs: 100 });
const isRoot = process.getuid?.() === 0;
const { admin } = cp;
let scratch: string;
let n = 0;
/**
 * Runner ids unique to this run: Docker resources are found by the forelead.runner label, and other
 * suites may share the engine.
 */
const tag = Math.random().toString(36).slice(2, 8);
const executors = await executorsUnderTest();
const repoRoot = join(import.meta.dirname, "../..");

beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), "forelead-resilience-"));
  // Process jobs run as users of their own and write markers here; sticky (as /tmp is), so no one
  // can replace another's entry, such as the runners' work directories (runner-work-dir.test.ts).
  await chmod(scratch, 0o1777);
});
afterAll(async () => {
  if (scratch) await rm(scratch, { recursive: true, force: true });
});

/** A database two control planes can open one after the other: a data directory when embedded. */
async function sharedDatabase(): Promise<{ database: TestDatabase; drop: () => Promise<void> }> {
  if (databaseKind === "postgres") {
    const database = await createTestDatabase();
    return { database, drop: () => database.drop() };
  }
  const dir = await mkdtemp(join(tmpdir(), "forelead-restart-"));
  const database: TestDatabase = {
    location: join(dir, "db"),
    kind: "embedded",
    drop: async () => {},
  };
  return { database, drop: () => rm(dir, { recursive: true, force: true }) };
}

async function enqueue(
  ws: string,
  executor: ExecutorKind,
  spec: Record<string, unknown>,
): Promise<string> {
  const reply = await admin.enqueue({ workspaceId: ws, spec: specFor(executor, spec) });
  expect(reply.status, reply.text).toBe(200);
  return reply.json.job.id;
}

async function state(
  jobId: string,
  wanted: (job: Record<string, unknown>) => boolean,
  what: string,
  timeoutMs = 30_000,
) {
  return eventually(
    `job ${jobId}: ${what}`,
    async () => {
      const job = (await admin.job(jobId)).json.job;
      return wanted(job) ? job : undefined;
    },
    timeoutMs,
  );
}
const settled = (jobId: string) =>
  state(jobId, (j) => ["succeeded", "failed", "cancelled"].includes(j.state as string), "settled");

/**
 * A job that says it started: process jobs create `<marker>.<id>` (each
 * attempt its own file: attempts run as different users), docker jobs are
 * seen running by the engine. The id is the job's uid as root (a uid of its own, and a PID
 * namespace where `$$` is not the host's pid), else its process group.
 */
function startedJob(executor: ExecutorKind, marker: string, rest: string): string[] {
  const id = isRoot ? "$(id -u)" : "$$";
  return ["sh", "-c", executor === "process" ? `touch ${marker}.${id}; ${rest}` : rest];
}
async function waitStarted(executor: ExecutorKind, jobId: string, marker: string): Promise<void> {
  await eventually(`job ${jobId} to be running in the executor`, async () => {
    if (executor === "process") return groups(marker).length > 0 ? true : undefined;
    const info = await createDockerClient()
      .getContainer(containerName(jobId))
      .inspect()
      .catch(() => undefined);
    return info?.State.Status === "running" ? true : undefined;
  });
}

/**
 * `forelead runner` as a child process, the way an operator starts it. A
 * restart right after a SIGKILL is refused (exit 6) while the killed process
 * still counts as live (its lease length): started again, as a supervisor does.
 */
async function spawnRunner(
  runnerId: string,
  ws: string,
  executor: ExecutorKind,
  extra: string[] = [],
): Promise<{ child: ChildProcess; output: () => string; exited: Promise<number | null> }> {
  const files = await runnerCertificateFiles(cp, runnerId, ws, scratch);
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
    executor,
    "--labels",
    "linux",
    "--work-dir",
    join(scratch, `work-${runnerId}`),
    "--grace-seconds",
    "1",
    ...extra,
  ];
  for (let attempt = 1; ; attempt++) {
    const child = spawn(process.execPath, args, {
      cwd: repoRoot,
      stdio: ["ignore", "pipe", "pipe"],
    });
    let text = "";
    let code: number | null | undefined;
    child.stdout!.on("data", (c) => (text += c));
    child.stderr!.on("data", (c) => (text += c));
    const exited = new Promise<number | null>((resolve) =>
      child.once("exit", (c) => resolve((code = c))),
    );
    await eventually(
      `runner ${runnerId} to register`,
      async () => (text.includes("registered as runner") || code !== undefined ? true : undefined),
      30_000,
    );
    if (code === 6 && attempt < 10) continue;
    expect(code, text).toBeUndefined();
    return { child, output: () => text, exited };
  }
}

describe.each(executors)(
  `a runner on the %s executor survives failures (${databaseKind})`,
  (executor) => {
    it(
      "a runner killed mid-job (SIGKILL) loses the job when its lease expires; " +
        "a second runner gets it and completes it once",
      async () => {
        const ws = `res${++n}`;
        const marker = join(scratch, `killed-${n}`);
        const first = await spawnRunner(`dies${n}-${tag}`, ws, executor);
        const jobId = await enqueue(ws, executor, {
          argv: startedJob(executor, marker, "sleep 4; echo finished"),
        });
        await waitStarted(executor, jobId, marker);
        first.child.kill("SIGKILL");
        await first.exited;
        const second = await startTestRunner(cp, {
          runnerId: `takes${n}-${tag}`,
          workspaceId: ws,
          executor,
        });
        try {
          const job = await settled(jobId);
          expect(job).toMatchObject({ state: "succeeded", exitCode: 0, attempts: 2 });
          const recorded = second.recorded.job(jobId);
          expect(recorded.events.map((e) => e.type)).toEqual(["job.started", "job.exited"]);
          expect(recorded.logs.map((l) => l.text)).toEqual(["finished"]);
          // The runner logs its completion after the control plane's reply, which can be after the
          // job reads settled.
          const completions = () => second.log.filter((l) => l.includes(`job ${jobId}: completed`));
          await eventually(`the second runner to log the completion of job ${jobId}`, async () =>
            completions().length > 0 ? true : undefined,
          );
          expect(completions()).toHaveLength(1);
        } finally {
          await second.close();
          if (executor === "process") killGroup(marker);
        }
      },
    );

    // The restart may be refused once (exit 6) while the killed process counts as live: room for a
    // second start.
    it.runIf(executor === "process")(
      "a runner restarted after a SIGKILL stops the process jobs its earlier life left running",
      { timeout: 90_000 },
      async () => {
        const ws = `res${++n}`;
        const marker = join(scratch, `leftover-${n}`);
        const first = await spawnRunner(`crashes${n}-${tag}`, ws, executor);
        // As root the job also says which cgroup it runs in (its sandbox, job-sandbox.ts).
        const cgroupFile = `${marker}-cgroup`;
        const jobId = await enqueue(ws, executor, {
          argv: startedJob(
            executor,
            marker,
            isRoot ? `grep '^0::' /proc/self/cgroup > ${cgroupFile}; sleep 60` : "sleep 60",
          ),
        });
        await waitStarted(executor, jobId, marker);
        first.child.kill("SIGKILL");
        await first.exited;
        await admin.cancel(jobId); // so the restarted runner does not take the job again
        expect(groupAlive(marker)).toBe(true); // detached from the dead runner, the job ran on
        const again = await spawnRunner(`crashes${n}-${tag}`, ws, executor);
        try {
          // The runner looks for leftovers once registered, so the line may follow the
          // registration's.
          // The recorded process: the job's own as a process group (not root), or its unshare.
          const leftover = new RegExp(
            `stopped a leftover of an earlier run: process group ` +
              `${isRoot ? "\\d+" : groups(marker)[0]} of job ${jobId}`,
          );
          await eventually("the restarted runner to report the leftover it stopped", async () =>
            leftover.test(again.output()) ? true : undefined,
          );
          await eventually("the leftover job's processes to be gone", async () =>
            groupAlive(marker) ? undefined : true,
          );
          if (isRoot) {
            // ... and the cgroup its sandbox made is removed.
            const { cgroupParent } = await probeIsolation();
            const cgroup = join(cgroupParent!, basename(readFileSync(cgroupFile, "utf8").trim()));
            expect(cgroup).toMatch(/forelead-job-[0-9a-f]+$/);
            await eventually("the leftover job's cgroup to be gone", async () =>
              existsSync(cgroup) ? undefined : true,
            );
          }
        } finally {
          again.child.kill("SIGTERM");
          await again.exited;
          killGroup(marker);
        }
      },
    );

    it("a control plane restarted mid-job (same database) does not fail the job", async () => {
      const { database, drop } = await sharedDatabase();
      const ws = `res${++n}`;
      const first = await startTestControlPlane({ database, leaseSeconds: 10, pki: cp.pki });
      const firstAdmin = await adminActor(first);
      const runner = await startTestRunner(first, {
        runnerId: `stays${n}-${tag}`,
        workspaceId: ws,
        executor,
      });
      let second: TestControlPlane | undefined;
      try {
        const jobId = (
          await firstAdmin.enqueue({
            workspaceId: ws,
            spec: specFor(executor, { argv: ["sh", "-c", "echo before; sleep 3; echo after"] }),
          })
        ).json.job.id;
        await runner.waitForLine(jobId, /^before$/);
        await firstAdmin.close();
        await first.plane.close();
        second = await startTestControlPlane({
          database,
          leaseSeconds: 10,
          pki: cp.pki,
          port: first.plane.port,
        });
        const secondAdmin = await adminActor(second);
        const job = await eventually(
          `job ${jobId} to settle after the restart`,
          async () => {
            const j = (await secondAdmin.job(jobId)).json.job;
            return ["succeeded", "failed", "cancelled"].includes(j.state) ? j : undefined;
          },
          30_000,
        );
        await secondAdmin.close();
        expect(job).toMatchObject({ state: "succeeded", exitCode: 0, attempts: 1 });
        expect(runner.recorded.job(jobId).logs.map((l) => l.text)).toEqual(["before", "after"]);
      } finally {
        await runner.close();
        await second?.plane.close();
        await drop();
      }
    });

    it("a runner that cannot renew past its lease's expiry kills the job and does not complete it", async () => {
      const { database, drop } = await sharedDatabase();
      const ws = `res${++n}`;
      const marker = join(scratch, `lost-${n}`);
      const plane = await startTestControlPlane({
        database,
        leaseSeconds: 2,
        sweepIntervalMs: 100,
        pki: cp.pki,
      });
      const planeAdmin = await adminActor(plane);
      const runner = await startTestRunner(plane, {
        runnerId: `loses${n}-${tag}`,
        workspaceId: ws,
        executor,
      });
      let again: TestControlPlane | undefined;
      try {
        const jobId = (
          await planeAdmin.enqueue({
            workspaceId: ws,
            spec: specFor(executor, { argv: startedJob(executor, marker, "sleep 60") }),
          })
        ).json.job.id;
        await waitStarted(executor, jobId, marker);
        await planeAdmin.close();
        // renewals now fail: the lease runs out by the runner's corrected clock
        await plane.plane.close();
        await eventually("the runner to declare the lease lost", async () =>
          runner.log.some((l) => l.includes(`job ${jobId}: lease lost`)) ? true : undefined,
        );
        if (executor === "process")
          await eventually("the job's processes to be gone", async () =>
            groupAlive(marker) ? undefined : true,
          );
        else
          await eventually("the container to be gone", async () =>
            (await runner.executor.resources()).length === 0 ? true : undefined,
          );
        await runner.close();
        expect(runner.log.filter((l) => l.includes(`job ${jobId}: complet`))).toEqual([]);
        // The control plane, back, requeues the job on expiry: nobody completed it.
        again = await startTestControlPlane({
          database,
          leaseSeconds: 2,
          sweepIntervalMs: 100,
          pki: cp.pki,
        });
        const againAdmin = await adminActor(again);
        const job = await eventually(`job ${jobId} to be requeued`, async () => {
          const j = (await againAdmin.job(jobId)).json.job;
          return j.state === "running" ? undefined : j;
        });
        await againAdmin.close();
        expect(job).toMatchObject({ state: "queued", attempts: 1 });
        expect(job.exitCode).toBeUndefined();
      } finally {
        await runner.close();
        await again?.plane.close();
        await drop();
      }
    });

    it("SIGTERM drains: no new claims, the running job finishes and is completed, then the runner exits", async () => {
      const ws = `res${++n}`;
      const marker = join(scratch, `drain-${n}`);
      const runner = await spawnRunner(`drains${n}-${tag}`, ws, executor);
      const jobId = await enqueue(ws, executor, { argv: startedJob(executor, marker, "sleep 2") });
      await waitStarted(executor, jobId, marker);
      runner.child.kill("SIGTERM");
      await eventually("the runner to say it drains", async () =>
        runner.output().includes("draining") ? true : undefined,
      );
      const later = await enqueue(ws, executor, { argv: ["true"] });
      expect(await runner.exited).toBe(0);
      expect((await admin.job(jobId)).json.job).toMatchObject({ state: "succeeded", attempts: 1 });
      expect((await admin.job(later)).json.job).toMatchObject({ state: "queued", attempts: 0 });
      await admin.cancel(later);
    });

    it(
      "a second SIGTERM stops the running job and releases its lease: the job " +
        "is queued again with no attempt charged",
      async () => {
        const ws = `res${++n}`;
        const marker = join(scratch, `force-${n}`);
        const runner = await spawnRunner(`forced${n}-${tag}`, ws, executor);
        const jobId = await enqueue(ws, executor, {
          argv: startedJob(executor, marker, "sleep 60"),
        });
        await waitStarted(executor, jobId, marker);
        runner.child.kill("SIGTERM");
        await eventually("the runner to say it drains", async () =>
          runner.output().includes("draining") ? true : undefined,
        );
        runner.child.kill("SIGTERM");
        expect(await runner.exited).toBe(0);
        expect(runner.output()).toContain(`job ${jobId}: lease released`);
        expect((await admin.job(jobId)).json.job).toMatchObject({ state: "queued", attempts: 0 });
        // Polled: the killed processes are reaped by init a moment later.
        if (executor === "process")
          await eventually("the job's processes to be gone", async () =>
            groupAlive(marker) ? undefined : true,
          );
        else
          expect(
            await createDockerClient()
              .getContainer(containerName(jobId))
              .inspect()
              .catch(() => "gone"),
          ).toBe("gone");
        await admin.cancel(jobId);
      },
    );
  },
);

/** The ids (uids as root, else process groups) of the jobs that created `<marker>.<id>`. */
function groups(marker: string): number[] {
  const prefix = `${basename(marker)}.`;
  return readdirSync(dirname(marker))
    .filter((f) => f.startsWith(prefix))
    .map((f) => Number(f.slice(prefix.length)));
}
function groupAlive(marker: string): boolean {
  return groups(marker).some((id) => {
    if (isRoot) return processesOf(id).length > 0;
    try {
      process.kill(-id, 0);
      return true;
    } catch {
      return false;
    }
  });
}
function killGroup(marker: string): void {
  for (const id of groups(marker)) {
    if (isRoot) killUid(id);
    else
      try {
        process.kill(-id, "SIGKILL");
      } catch {
        // gone already
      }
  }
}
