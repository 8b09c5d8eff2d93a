// The operator commands of issue 17 as an operator runs them: `bin/forelead.js`
// spawned with certificate files against a real control plane, the --json
// output parsed, the effect checked through the routes or a claim.
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { adminActor, eventually, registeredRunner } from "../support/actors.js";
import {
  startTestControlPlane,
  testAdminId,
  type TestControlPlane,
} from "../support/control-plane.js";
import { createTestDatabase, databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";
import type { TestPki } from "../support/pki.js";

const run = promisify(execFile);
const forelead = join(process.cwd(), "bin/forelead.js");
const MiB = 1024 * 1024;

const cp = useControlPlane();
const { admin } = cp;
let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "forelead-cli-op-"));
});
afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

/**
 * Writes the CA and the test-admin certificate of `pki` as files; returns the flags naming them and
 * `url`.
 */
async function certFlags(pki: TestPki, url: string): Promise<string[]> {
  const admin = await pki.service("test-admin");
  await writeFile(join(dir, "ca.pem"), pki.ca.certPem);
  await writeFile(join(dir, "admin.pem"), admin.certPem);
  await writeFile(join(dir, "admin-key.pem"), admin.keyPem);
  return [
    "--server",
    url,
    "--ca",
    join(dir, "ca.pem"),
    "--cert",
    join(dir, "admin.pem"),
    "--key",
    join(dir, "admin-key.pem"),
  ];
}

/**
 * Runs `forelead ...args` against the file's control plane to completion; never throws, so refusals
 * can be asserted.
 */
async function forel(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const flags = await certFlags(cp.pki, cp.url);
  try {
    const { stdout, stderr } = await run(process.execPath, [forelead, ...args, ...flags], {
      cwd: dir,
      timeout: 60_000,
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
}

/** Runs `forelead ...args --json`, expects exit 0 and returns its lines parsed. */
async function json<T = Record<string, unknown>>(...args: string[]): Promise<T[]> {
  const out = await forel(...args, "--json");
  expect(out.code, out.stderr).toBe(0);
  return out.stdout
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l) as T);
}

interface EventJson {
  id: string;
  type: string;
  workspaceId?: string;
  runnerId?: string;
  jobId?: string;
  data?: Record<string, unknown>;
}

/** `forelead events --follow --json ...args` as a child whose lines are parsed as they come. */
function follower(
  flags: string[],
  ...args: string[]
): { child: ChildProcess; events: EventJson[]; stderr: () => string } {
  const child = spawn(
    process.execPath,
    [forelead, "events", "--follow", "--json", ...args, ...flags],
    { cwd: dir, stdio: ["ignore", "pipe", "pipe"] },
  );
  const events: EventJson[] = [];
  let stderr = "";
  child.stderr!.on("data", (d: Buffer) => (stderr += d.toString()));
  createInterface({ input: child.stdout! }).on("line", (l) =>
    events.push(JSON.parse(l) as EventJson),
  );
  return { child, events, stderr: () => stderr };
}

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once("exit", resolve));
  child.kill("SIGTERM");
  await exited;
}

describe(`forelead operator commands (${databaseKind})`, () => {
  it("workspaces pause and resume: a paused workspace's job is not leased, after resume it is", async () => {
    const runner = await registeredRunner(cp, "op-r1", "op-w1");
    const job = (await admin.enqueue({ workspaceId: "op-w1" })).json.job.id as string;

    const paused = await forel("workspaces", "pause", "op-w1", "--reason", "maintenance");
    expect(paused.code, paused.stderr).toBe(0);
    expect(paused.stdout).toBe('workspace "op-w1" paused (maintenance)\n');
    expect((await forel("workspaces", "pause", "op-w1")).stdout).toMatch(
      /^workspace "op-w1" was already paused/,
    );
    const [again] = await json<{ workspaceId: string; alreadyPaused?: boolean; pausedBy: string }>(
      "workspaces",
      "pause",
      "op-w1",
    );
    expect(again).toMatchObject({
      workspaceId: "op-w1",
      alreadyPaused: true,
      pausedBy: testAdminId,
    });
    expect((await runner.claim({ waitSeconds: 0 })).status).toBe(204);

    const [resumed] = await json<{ workspaceId: string; wasPaused?: boolean }>(
      "workspaces",
      "resume",
      "op-w1",
    );
    expect(resumed).toMatchObject({ workspaceId: "op-w1", wasPaused: true });
    expect((await forel("workspaces", "resume", "op-w1")).stdout).toBe(
      'workspace "op-w1" was not paused\n',
    );
    const claim = await runner.claim({ waitSeconds: 0 });
    expect(claim.status, claim.text).toBe(200);
    expect(claim.json.job.id).toBe(job);
    await runner.close();
  });

  it("runners pause and resume: a paused runner gets no lease, after resume it does", async () => {
    const runner = await registeredRunner(cp, "op-r2", "op-w2");
    const job = (await admin.enqueue({ workspaceId: "op-w2" })).json.job.id as string;
    const paused = await forel("runners", "pause", "op-r2", "--workspace", "op-w2");
    expect(paused.code, paused.stderr).toBe(0);
    expect(paused.stdout).toBe('runner "op-r2" in workspace "op-w2" paused\n');
    expect((await runner.claim({ waitSeconds: 0 })).status).toBe(204);
    const [resumed] = await json<{ runnerId: string; workspaceId: string; wasPaused?: boolean }>(
      "runners",
      "resume",
      "op-r2",
      "--workspace",
      "op-w2",
    );
    expect(resumed).toMatchObject({ runnerId: "op-r2", workspaceId: "op-w2", wasPaused: true });
    const claim = await runner.claim({ waitSeconds: 0 });
    expect(claim.status, claim.text).toBe(200);
    expect(claim.json.job.id).toBe(job);
    await runner.close();
  });

  it(
    "events lists a job's events in order, filtered by workspace and type; " +
      "events --follow sees a new one arrive",
    async () => {
      const runner = await registeredRunner(cp, "op-r3", "op-w3");
      const job = (await admin.enqueue({ workspaceId: "op-w3" })).json.job.id as string;
      expect((await runner.claim({ waitSeconds: 0 })).status).toBe(200);

      const events = await json<EventJson>("events", "--workspace", "op-w3");
      expect(events.map((e) => e.type)).toEqual(["runner.registered", "job.queued", "job.leased"]);
      expect(events.slice(1).every((e) => e.jobId === job && e.workspaceId === "op-w3")).toBe(true);
      expect(events.map((e) => BigInt(e.id))).toEqual(
        events.map((e) => BigInt(e.id)).sort((a, b) => (a < b ? -1 : 1)),
      );
      expect(
        (await json<EventJson>("events", "--workspace", "op-w3", "--type", "job.leased")).map(
          (e) => e.jobId,
        ),
      ).toEqual([job]);
      expect(
        await json<EventJson>("events", "--workspace", "op-w3", "--after", events[2]!.id),
      ).toEqual([]);
      const text = await forel("events", "--workspace", "op-w3", "--type", "job.leased");
      expect(text.stdout).toMatch(
        new RegExp(
          `^${events[2]!.id}  \\S+Z  job\\.leased  workspace=op-w3 runner=op-r3 job=${job}`,
        ),
      );

      const follow = follower(
        await certFlags(cp.pki, cp.url),
        "--workspace",
        "op-w3",
        "--after",
        events[2]!.id,
      );
      try {
        const next = (await admin.enqueue({ workspaceId: "op-w3" })).json.job.id as string;
        const seen = await eventually("the follower to print the new job.queued", async () =>
          follow.events.length > 0 ? follow.events : undefined,
        );
        expect(seen[0]).toMatchObject({ type: "job.queued", jobId: next, workspaceId: "op-w3" });
        expect(BigInt(seen[0]!.id)).toBeGreaterThan(BigInt(events[2]!.id));
      } finally {
        await stop(follow.child);
      }
      await runner.close();
    },
  );

  it(
    "stats --since 7d shows a settled job; a bad --since exits 1 with the " +
      "server's message naming the forms",
    async () => {
      const runner = await registeredRunner(cp, "op-r4", "op-w4");
      const job = (await admin.enqueue({ workspaceId: "op-w4" })).json.job.id as string;
      const lease = await runner.claim({ waitSeconds: 0 });
      expect((await runner.complete(job, lease.json.token)).status).toBe(200);

      const [stats] = await json<{
        workspaces: Array<{
          workspaceId: string;
          jobs: string;
          byState: Array<{ key: string; count: string }>;
          attempts: string;
          runners: Array<{ runnerId: string; jobs: string }>;
        }>;
      }>("stats", "--since", "7d", "--workspace", "op-w4");
      expect(stats!.workspaces).toHaveLength(1);
      expect(stats!.workspaces[0]).toMatchObject({
        workspaceId: "op-w4",
        jobs: "1",
        byState: [{ key: "succeeded", count: "1" }],
        attempts: "1",
        runners: [{ runnerId: "op-r4", jobs: "1" }],
      });
      const text = await forel("stats", "--workspace", "op-w4");
      expect(text.code, text.stderr).toBe(0);
      expect(text.stdout).toMatch(/^workspace op-w4: 1 jobs \(succeeded 1\); error codes: none$/m);
      expect(text.stdout).toMatch(/^ {2}wait +1 +\d+\.\d/m);
      expect(text.stdout).toMatch(/^ {2}op-r4 +1 +\d+\.\d$/m);

      const bad = await forel("stats", "--since", "last tuesday");
      expect(bad.code).toBe(1);
      expect(bad.stdout).toBe("");
      expect(bad.stderr).toMatch(/^forelead: error: .*last tuesday.*RFC 3339.*Unix seconds.*30d/);
      await runner.close();
    },
  );

  it("jobs samples gives the series and peaks; sizing gives the advice for the job's group", async () => {
    const runner = await registeredRunner(cp, "op-r5", "op-w5");
    const job = (
      await admin.enqueue({
        workspaceId: "op-w5",
        spec: {
          image: "app:1",
          argv: ["make"],
          timeoutSeconds: 60,
          cpu: 1,
          memoryBytes: String(512 * MiB),
        },
      })
    ).json.job.id as string;
    const lease = await runner.claim({ waitSeconds: 0 });
    expect(lease.status, lease.text).toBe(200);
    const msg = (sequence: number, data: unknown) => ({
      apiVersion: "v1",
      runnerId: "op-r5",
      jobId: job,
      leaseToken: lease.json.token,
      sequence,
      data,
    });
    const sent = await runner.rest.ndjson("/v1/runner/events", [
      msg(1, {
        type: "resource.sample",
        cpuCores: 0.1,
        memoryBytes: 100 * MiB,
        at: new Date().toISOString(),
      }),
      msg(2, {
        type: "resource.sample",
        cpuCores: 0.2,
        memoryBytes: 200 * MiB,
        at: new Date().toISOString(),
      }),
    ]);
    expect(sent.status, sent.text).toBe(204);
    expect((await runner.complete(job, lease.json.token)).status).toBe(200);

    const [samples] = await json<{
      jobId: string;
      samples: Array<{ cpuCores: number; memoryBytes: string }>;
      peakCpuCores: number;
      peakMemoryBytes: string;
    }>("jobs", "samples", job);
    expect(samples).toMatchObject({
      jobId: job,
      peakCpuCores: 0.2,
      peakMemoryBytes: String(200 * MiB),
    });
    expect(samples!.samples.map((s) => s.cpuCores)).toEqual([0.1, 0.2]);
    expect((await forel("jobs", "samples", job)).stdout).toMatch(
      new RegExp(
        `^job ${job}: 2 samples, peak cpu 0\\.20 cores, peak memory ${200 * MiB} bytes$`,
        "m",
      ),
    );

    const [sizing] = await json<{
      groups: Array<{
        workspaceId: string;
        jobs: string;
        cpu: { requested: number; advice: string };
        memory: { advice: string };
      }>;
    }>("sizing", "--since", "7d", "--workspace", "op-w5");
    expect(sizing!.groups).toHaveLength(1);
    expect(sizing!.groups[0]).toMatchObject({
      workspaceId: "op-w5",
      jobs: "1",
      cpu: { requested: 1, advice: "lower" },
      memory: { advice: "lower" },
    });
    const table = await forel("sizing", "--workspace", "op-w5");
    expect(table.stdout).toMatch(
      /^workspace +labels +image +jobs +cpu req +cpu p95 +cpu advice +memory req +memory p95 +memory advice$/m,
    );
    expect(table.stdout).toMatch(/^op-w5 +linux +app:1 +1 +1\.00 +0\.\d+ +lower to 0\.\d+ +/m);
    await runner.close();
  });

  it("jobs list takes the history filters: the queued jobs oldest first, by label and runner", async () => {
    const first = (await admin.enqueue({ workspaceId: "op-w6" })).json.job.id as string;
    const second = (await admin.enqueue({ workspaceId: "op-w6", labels: ["linux", "gpu"] })).json
      .job.id as string;
    const [oldest] = await json<{ jobs: Array<{ id: string; state: string }> }>(
      "jobs",
      "list",
      "--workspace",
      "op-w6",
      "--state",
      "queued",
      "--order",
      "oldest",
    );
    expect(oldest!.jobs.map((j) => j.id)).toEqual([first, second]);
    expect(oldest!.jobs.every((j) => j.state === "queued")).toBe(true);
    const [newest] = await json<{ jobs: Array<{ id: string }> }>(
      "jobs",
      "list",
      "--workspace",
      "op-w6",
      "--state",
      "queued",
      "--state",
      "running",
      "--since",
      "1h",
    );
    expect(newest!.jobs.map((j) => j.id)).toEqual([second, first]);
    const [gpu] = await json<{ jobs: Array<{ id: string }> }>(
      "jobs",
      "list",
      "--workspace",
      "op-w6",
      "--label",
      "gpu",
    );
    expect(gpu!.jobs.map((j) => j.id)).toEqual([second]);
    const [none] = await json<{ jobs?: unknown[] }>(
      "jobs",
      "list",
      "--workspace",
      "op-w6",
      "--runner",
      "nobody",
    );
    expect(none!.jobs ?? []).toEqual([]);
    const text = await forel("jobs", "list", "--workspace", "op-w6", "--order", "oldest");
    expect(text.stdout).toMatch(
      new RegExp(
        `^job +name +state +workspace .*\\n${first} +- +queued +op-w6 +linux +0 +- +- ` +
          `+\\S+Z\\n${second} +- +queued +op-w6 +gpu,linux `,
        "m",
      ),
    );
    const bad = await forel("jobs", "list", "--order", "sideways");
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/^forelead: error: .*order/);
  });
});

describe(`forelead events --follow across a control-plane restart (${databaseKind})`, () => {
  it(
    "reconnects after the control plane restarts and resumes after the last " +
      "id: every event once, in order",
    async () => {
      // Embedded: a data directory, so the second process life sees the same database.
      const dbDir =
        databaseKind === "embedded"
          ? await mkdtemp(join(tmpdir(), "forelead-cli-restart-"))
          : undefined;
      const database = dbDir
        ? {
            location: join(dbDir, "db"),
            kind: "embedded" as const,
            drop: () => rm(dbDir, { recursive: true, force: true }),
          }
        : await createTestDatabase();
      let plane: TestControlPlane | undefined = await startTestControlPlane({ database });
      const { pki } = plane;
      const port = Number(new URL(plane.url).port);
      const follow = follower(await certFlags(pki, plane.url), "--workspace", "op-wf");
      try {
        let restAdmin = await adminActor(plane);
        const before = (await restAdmin.enqueue({ workspaceId: "op-wf" })).json.job.id as string;
        await eventually("the follower to print the first job.queued", async () =>
          follow.events.length >= 1 ? true : undefined,
        );
        await restAdmin.close();
        await plane.close();
        plane = await startTestControlPlane({ database, pki, port });
        restAdmin = await adminActor(plane);
        const after = [];
        for (let i = 0; i < 3; i++)
          after.push((await restAdmin.enqueue({ workspaceId: "op-wf" })).json.job.id as string);
        await restAdmin.close();
        await eventually(
          "the follower to print the events written after the restart",
          async () => (follow.events.length >= 4 ? true : undefined),
          30_000,
        );
        expect(follow.events.map((e) => e.jobId)).toEqual([before, ...after]);
        expect(follow.events.every((e) => e.type === "job.queued")).toBe(true);
        const ids = follow.events.map((e) => BigInt(e.id));
        expect(ids.every((id, i) => i === 0 || id > ids[i - 1]!)).toBe(true);
        expect(follow.stderr()).toMatch(/forelead: events: .*resuming after event \d+/);
        expect(follow.child.exitCode).toBeNull(); // still following
      } finally {
        await stop(follow.child);
        await plane?.close();
        await database.drop();
      }
    },
  );
});
