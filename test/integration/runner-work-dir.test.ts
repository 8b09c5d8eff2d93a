import "reflect-metadata";
import { spawn, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { chmod, chown, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { eventually } from "../support/actors.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";
import { startTestRunner } from "../support/runner-agent.js";
import { defaultWorkDir } from "../../src/runner/lifecycle/work-dir.js";
import { processStartTicks } from "../../src/runner/executors/proc.js";

// The runner's work directory is the runner's own (hostile-jobs issue, item 3): another local user
// who made it, or a parent of it, first, or who planted a pid record in it, gets nothing.
const cp = useControlPlane();
const isRoot = process.getuid?.() === 0;
const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0)) await c();
});
let n = 0;

async function scratch(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "forelead-workdir-"));
  cleanups.push(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

/** A detached `sleep` (a process group leader), as `uid` when given; killed after the test. */
function sleeper(uid?: number): ChildProcess {
  const child = spawn("sleep", ["120"], { detached: true, stdio: "ignore", uid, gid: uid });
  cleanups.push(async () => {
    try {
      process.kill(-child.pid!, "SIGKILL");
    } catch {
      // gone
    }
  });
  return child;
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return !readFileSync(`/proc/${pid}/stat`, "utf8").includes(") Z ");
  } catch {
    return false;
  }
};

/** Writes the pid record the process executor keeps beside a job's directory. */
async function plantPidRecord(workDir: string, pid: number): Promise<void> {
  const startTicks = processStartTicks(pid);
  await mkdir(join(workDir, "jobs"), { recursive: true });
  await writeFile(
    join(workDir, "jobs", "planted.pid"),
    JSON.stringify({ pid, startTicks, jobId: "planted" }),
  );
}

const start = (workDir: string) =>
  startTestRunner(cp, { runnerId: `wd${++n}`, workspaceId: "wd", executor: "process", workDir });

describe.runIf(isRoot)(`the runner's work directory (${databaseKind})`, () => {
  it("a work directory inside a directory another user made first is refused, naming it", async () => {
    const theirs = await scratch();
    await chown(theirs, 4242, 4242);
    const refused = await start(join(theirs, "forelead-runner", "r1")).catch((e: Error) => e);
    expect(refused).toBeInstanceOf(Error);
    expect((refused as Error).message).toContain(`${theirs} belongs to uid 4242`);
    expect((refused as Error).message).toContain("--work-dir");
  });

  it("a work directory under a world-writable directory without the sticky bit is refused", async () => {
    const open = await scratch();
    await chmod(open, 0o777);
    const refused = await start(join(open, "work")).catch((e: Error) => e);
    expect((refused as Error).message).toMatch(/is writable by every user \(mode 777\)/);
  });

  it("a planted pid record naming a process of another uid is never acted on; one of a job's uid is", async () => {
    const workDir = await scratch();
    const stranger = sleeper(); // root's, as a system daemon would be
    const leftover = sleeper(200_123); // a job uid's, as a crashed runner's job would be
    await eventually("both sleepers to run", async () =>
      alive(stranger.pid!) && alive(leftover.pid!) ? true : undefined,
    );
    await plantPidRecord(workDir, stranger.pid!);
    const runner = await start(workDir);
    cleanups.push(() => runner.close());
    await mkdir(join(workDir, "jobs"), { recursive: true });
    expect(alive(stranger.pid!)).toBe(true);
    expect(runner.log.join("\n")).not.toContain("planted");
    await runner.close();

    await plantPidRecord(workDir, leftover.pid!);
    const again = await start(workDir);
    cleanups.push(() => again.close());
    await eventually("the job uid's leftover to be stopped", async () =>
      alive(leftover.pid!) ? undefined : true,
    );
    expect(alive(stranger.pid!)).toBe(true);
  });
});

describe("the default work directory", () => {
  it("is beside the enrolled identity, or in the user's state directory, never in /tmp", () => {
    expect(defaultWorkDir("r1", "/var/lib/forelead-runner/r1")).toBe(
      "/var/lib/forelead-runner/r1/r1/work",
    );
    const own = defaultWorkDir("r1");
    expect(own.startsWith(tmpdir())).toBe(false);
    expect(own).toMatch(/forelead\/runners\/r1\/work$/);
  });
});
