// What operators see of runners and attempts must be true (issue 46 items 1 and 2): one runner
// state (idle, busy, paused, draining, offline, retired) read the same way by runners list, status
// and metrics; a busy runner stays busy through a job longer than the offline threshold; a killed
// runner turns offline; each attempt keeps its runner, outcome and exit code.
import { spawn } from "node:child_process";
import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { createServer, type AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { eventually, leasedJob, registeredRunner } from "../support/actors.js";
import { foreleadBin, useCliDir } from "../support/cli-dir.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";
import { scrape } from "../support/metrics.js";
import { runnerCertificateFiles, startTestRunner } from "../support/runner-agent.js";

// Leases of 4 s (a runner renews every ~1.3 s, an idle one polls every 2 s) and an offline
// threshold of 6 s, so a job of 9 s outlasts the threshold.
const offlineSeconds = 6;
const cp = useControlPlane({
  leaseSeconds: 4,
  runnerOfflineSeconds: offlineSeconds,
  sweepIntervalMs: 200,
  metricsListen: { host: "127.0.0.1", port: 0 },
});
const { admin } = cp;
const cli = useCliDir(cp, "runner-state");
const tag = Math.random().toString(36).slice(2, 8);
let scratch = "";
beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), "forelead-runner-state-"));
});
afterAll(async () => {
  if (scratch) await rm(scratch, { recursive: true, force: true });
});

interface RunnerJson {
  runnerId: string;
  state: string;
  version?: string;
  lastSeenAt?: string;
}

async function runnerView(runnerId: string): Promise<RunnerJson | undefined> {
  const reply = await admin.rest.request("GET", "/v1/admin/runners");
  expect(reply.status, reply.text).toBe(200);
  return (reply.json.runners as RunnerJson[]).find((r) => r.runnerId === runnerId);
}

/** The STATE column of `forelead runners list` for one runner. */
async function listedState(runnerId: string): Promise<string | undefined> {
  const out = await cli.forel(["runners", "list", ...cli.connection()]);
  expect(out.code, out.stderr).toBe(0);
  const lines = out.stdout.split("\n");
  expect(lines[0]).toMatch(/^runner\s+workspace\s+state\s+slots/);
  return lines.find((l) => l.startsWith(`${runnerId} `))?.split(/\s+/)[2];
}

/** `forelead runner` as a child process against `server`, with the process executor. */
async function cliRunner(runnerId: string, ws: string, server: string, viaNpx = false) {
  const files = await runnerCertificateFiles(cp, runnerId, ws, scratch);
  // Through npx: npm exec runs `sh -c 'forelead runner …'` from this checkout's own bin.
  const [command, start] = viaNpx
    ? ["npx", ["--no-install", "forelead"]]
    : [process.execPath, [foreleadBin]];
  const child = spawn(
    command,
    [
      ...start,
      "runner",
      "--server",
      server,
      ...["--ca", files.ca, "--cert", files.cert, "--key", files.key],
      ...["--executor", "process", "--labels", "linux"],
      ...["--work-dir", join(scratch, `work-${runnerId}`)],
    ],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  let text = "";
  child.stdout.on("data", (c) => (text += c));
  child.stderr.on("data", (c) => (text += c));
  const exited = new Promise<number | null>((resolve) => child.once("exit", resolve));
  return { child, output: () => text, exited };
}

describe(`runner states (${databaseKind})`, () => {
  it("a runner busy with a job longer than the offline threshold stays busy throughout", async () => {
    const ws = `busy-${tag}`;
    const runner = await startTestRunner(cp, {
      runnerId: `busy-${tag}`,
      workspaceId: ws,
      executor: "process",
    });
    try {
      const enq = await admin.enqueue({
        workspaceId: ws,
        spec: { image: "busybox", argv: ["sh", "-c", "sleep 9"], timeoutSeconds: 60 },
      });
      expect(enq.status, enq.text).toBe(200);
      const jobId: string = enq.json.job.id;
      const started = await eventually("the job to be leased", async () => {
        const job = (await admin.job(jobId)).json.job;
        return job.state === "running" ? Date.parse(job.attemptHistory[0].startedAt) : undefined;
      });
      const seen: string[] = [];
      let pastThreshold = 0;
      for (;;) {
        const job = (await admin.job(jobId)).json.job;
        if (job.state !== "running") {
          expect(job.state).toBe("succeeded");
          break;
        }
        const state = (await runnerView(`busy-${tag}`))?.state ?? "missing";
        seen.push(state);
        if (Date.now() - started > (offlineSeconds + 1) * 1000) pastThreshold++;
        await new Promise((r) => setTimeout(r, 300));
      }
      // Asked while the job ran, past the threshold too: busy every time.
      expect(pastThreshold).toBeGreaterThan(0);
      expect(new Set(seen)).toEqual(new Set(["busy"]));
    } finally {
      await runner.close();
    }
  });

  it("a killed runner turns offline in runners list, status and metrics; forget then removes it", async () => {
    const ws = `killed-${tag}`;
    const runnerId = `killed-${tag}`;
    const { child, output, exited } = await cliRunner(runnerId, ws, cp.url);
    try {
      await eventually("the runner to register", async () =>
        output().includes("registered as runner") ? true : undefined,
      );
      const view = await runnerView(runnerId);
      expect(view).toMatchObject({ state: "idle", version: expect.stringMatching(/^\d+\.\d+/) });
      expect(await listedState(runnerId)).toBe("idle");
      const got = await cli.forel(["runners", "get", runnerId, ...cli.connection()]);
      expect(got.code, got.stderr).toBe(0);
      expect(got.stdout).toMatch(/^state:\s+idle$/m);
      expect(got.stdout).toMatch(/^version:\s+\d+\.\d+/m);
      // Refused while it is live, by name and state.
      const early = await cli.forel(["runners", "forget", runnerId, ...cli.connection()]);
      expect(early.code).not.toBe(0);
      expect(early.stderr).toMatch(/is idle, not offline/);
    } finally {
      child.kill("SIGKILL");
      await exited;
    }
    const killedAt = Date.now();
    // Offline once silent for the threshold; an idle runner was last heard from at most one claim
    // poll (2 s) before it was killed.
    await eventually(
      "runners list to say offline",
      async () => ((await listedState(runnerId)) === "offline" ? true : undefined),
      (offlineSeconds + 10) * 1000,
      250,
    );
    expect(Date.now() - killedAt).toBeGreaterThan(offlineSeconds * 1000 - 2_500);
    const status = await admin.rest.request("GET", "/v1/admin/status");
    expect(status.status, status.text).toBe(200);
    expect(Number(status.json.runners.offline)).toBeGreaterThanOrEqual(1);
    const metrics = await scrape(cp.plane.metrics!.url);
    expect(metrics.value("forelead_runners", { state: "offline" })).toBeGreaterThanOrEqual(1);
    const forgot = await cli.forel(["runners", "forget", runnerId, ...cli.connection()]);
    expect(forgot.code, forgot.stderr).toBe(0);
    expect(forgot.stdout).toMatch(/forgotten \(its identity is not retired\)/);
    expect(await runnerView(runnerId)).toBeUndefined();
    // Not retired: the identity registers again.
    await registeredRunner(cp, runnerId, ws);
    expect((await runnerView(runnerId))?.state).toBe("idle");
  });

  it("a runner told to stop while its job runs is draining until it stops, then offline", async () => {
    const ws = `drain-${tag}`;
    const runnerId = `drain-${tag}`;
    const { child, output, exited } = await cliRunner(runnerId, ws, cp.url);
    await eventually("the runner to register", async () =>
      output().includes("registered as runner") ? true : undefined,
    );
    const enq = await admin.enqueue({
      workspaceId: ws,
      spec: { image: "busybox", argv: ["sh", "-c", "sleep 4"], timeoutSeconds: 60 },
    });
    expect(enq.status, enq.text).toBe(200);
    await eventually("the runner to be busy", async () =>
      (await runnerView(runnerId))?.state === "busy" ? true : undefined,
    );
    child.kill("SIGTERM");
    await eventually("the runner to be draining", async () =>
      (await runnerView(runnerId))?.state === "draining" ? true : undefined,
    );
    expect(await exited).toBe(0);
    expect((await admin.job(enq.json.job.id)).json.job.state).toBe("succeeded");
    await eventually(
      "the stopped runner to be offline",
      async () => ((await runnerView(runnerId))?.state === "offline" ? true : undefined),
      (offlineSeconds + 10) * 1000,
      250,
    );
  });

  it("a paused runner is paused, and its slots are not free", async () => {
    const ws = `paused-${tag}`;
    const runnerId = `paused-${tag}`;
    await registeredRunner(cp, runnerId, ws, { slots: 3 });
    const before = (await admin.rest.request("GET", "/v1/admin/status")).json.pool;
    const paused = await admin.rest.request("POST", `/v1/admin/runners/${runnerId}/pause`, {
      apiVersion: "v1",
    });
    expect(paused.status, paused.text).toBe(200);
    expect((await runnerView(runnerId))?.state).toBe("paused");
    const after = (await admin.rest.request("GET", "/v1/admin/status")).json.pool;
    // proto3 JSON leaves a zero out.
    expect(Number(before.slotsFree ?? 0) - Number(after.slotsFree ?? 0)).toBe(3);
  });
});

describe(`attempt history (${databaseKind})`, () => {
  it("a retried job lists both attempts with their runners; settled jobs keep their runner", async () => {
    const ws = `retry-${tag}`;
    const first = await registeredRunner(cp, `first-${tag}`, ws);
    const second = await registeredRunner(cp, `second-${tag}`, ws);
    const enq = await admin.enqueue({ workspaceId: ws, maxAttempts: 2 });
    expect(enq.status, enq.text).toBe(200);
    const jobId: string = enq.json.job.id;
    const a = await first.claim();
    expect(a.status, a.text).toBe(200);
    const failed = await first.complete(jobId, a.json.token, {
      completionId: "c-1",
      outcome: "failed",
      exitCode: 3,
      error: { code: "exit_code", message: "exited 3", retryable: true },
    });
    expect(failed.status, failed.text).toBe(200);
    const b = await eventually("the retry to be claimable", async () => {
      const reply = await second.claim({ waitSeconds: 1 });
      return reply.status === 200 ? reply : undefined;
    });
    expect((await second.complete(jobId, b.json.token, { completionId: "c-2" })).status).toBe(200);

    const job = (await admin.job(jobId)).json.job;
    expect(job.attempts).toBe(2);
    expect(job.attemptHistory).toMatchObject([
      { attempt: 1, runnerId: `first-${tag}`, outcome: "retried", exitCode: 3 },
      { attempt: 2, runnerId: `second-${tag}`, outcome: "succeeded", exitCode: 0 },
    ]);
    for (const entry of job.attemptHistory) {
      expect(Date.parse(entry.endedAt)).toBeGreaterThanOrEqual(Date.parse(entry.startedAt));
      expect(Number(entry.durationMs)).toBeGreaterThanOrEqual(0);
    }

    // jobs get prints the attempt lines; jobs list --runner names the settled job's runner.
    const got = await cli.forel(["jobs", "get", jobId, ...cli.connection()]);
    expect(got.code, got.stderr).toBe(0);
    expect(got.stdout).toMatch(new RegExp(`attempt:\\s+#1 first-${tag} retried exit 3, `));
    expect(got.stdout).toMatch(new RegExp(`attempt:\\s+#2 second-${tag} succeeded exit 0, `));
    const listed = await cli.forel([
      ...["jobs", "list", "--workspace", ws, "--runner", `second-${tag}`],
      ...cli.connection(),
    ]);
    expect(listed.code, listed.stderr).toBe(0);
    const [head, row] = listed.stdout.split("\n");
    expect(head).toMatch(/\brunner\s+duration\s+created\b/);
    expect(row).toMatch(new RegExp(`^${jobId}\\s+-\\s+succeeded\\s+.*\\s+second-${tag}\\s+\\d`));
  });

  it("a stream write under a live lease refreshes the runner's last-seen", async () => {
    const leased = await leasedJob(cp, admin, `writer-${tag}`, `writer-${tag}`);
    try {
      const seen = async () => Date.parse((await runnerView(`writer-${tag}`))!.lastSeenAt!);
      const claimedSeen = await seen();
      // Past the once-a-second bound of every last-seen write but register's and claim's.
      await new Promise((r) => setTimeout(r, 1_200));
      const line = leased.msg(1, { stream: "stdout", text: "one" });
      expect((await leased.runner.rest.ndjson("/v1/runner/logs", [line])).status).toBe(204);
      expect(await seen()).toBeGreaterThan(claimedSeen);
    } finally {
      await leased.runner.close();
    }
  });

  it("a cancelled attempt names who cancelled it", async () => {
    const ws = `cancel-${tag}`;
    const runner = await registeredRunner(cp, `cancelled-${tag}`, ws);
    const enq = await admin.enqueue({ workspaceId: ws });
    const jobId: string = enq.json.job.id;
    const claim = await runner.claim();
    expect(claim.status, claim.text).toBe(200);
    expect((await admin.cancel(jobId)).status).toBe(200);
    const done = await runner.complete(jobId, claim.json.token, {
      outcome: "cancelled",
      exitCode: undefined,
    });
    expect(done.status, done.text).toBe(200);
    const job = (await admin.job(jobId)).json.job;
    expect(job.attemptHistory).toMatchObject([
      {
        runnerId: `cancelled-${tag}`,
        outcome: "cancelled",
        cancelledBy: "spiffe://forelead/services/test-admin",
      },
    ]);
  });
});

describe("a runner that cannot reach the control plane (issue 46 item 4)", () => {
  it("says what to check in plain words, and stops at once on SIGTERM while it retries", async () => {
    const runnerId = `unreachable-${tag}`;
    // A port nothing listens on: taken, then closed.
    const port = await new Promise<number>((resolve) => {
      const s = createServer().listen(0, "127.0.0.1", () => {
        const { port } = s.address() as AddressInfo;
        s.close(() => resolve(port));
      });
    });
    const { child, output, exited } = await cliRunner(runnerId, "w1", `https://127.0.0.1:${port}`);
    await eventually("the runner to retry twice", async () =>
      (output().match(/cannot register yet/g) ?? []).length >= 2 ? true : undefined,
    );
    expect(output()).toContain(
      `cannot reach the control plane at https://127.0.0.1:${port} (ECONNREFUSED): nothing ` +
        "listens there; check that the control plane is running and that --server names its " +
        "host and port",
    );
    expect(output()).not.toMatch(/pending stream/i);
    child.kill("SIGTERM");
    // The old runner slept on in its retry loop (623 s after two SIGTERMs); the test's own timeout
    // is the bound.
    expect(await exited).toBe(0);
    expect(output()).toMatch(/SIGTERM while connecting to the control plane: stopped/);
  }, 30_000);

  it("under npx, a SIGTERM to npm reaches the runner's own process", async () => {
    const runnerId = `npx-${tag}`;
    const { child, output, exited } = await cliRunner(runnerId, "w1", `https://127.0.0.1:1`, true);
    try {
      await eventually(
        "the runner to retry",
        async () => (/cannot register yet/.test(output()) ? true : undefined),
        30_000,
      );
      child.kill("SIGTERM");
      await exited;
      // npm forwards the signal to its shell only; before, the runner ran on as an orphan and never
      // said this. The runner's process writes it after npm is gone (it holds the same pipes).
      await eventually(
        "the runner's own process to stop on the SIGTERM",
        async () =>
          /SIGTERM while connecting to the control plane: stopped/.test(output())
            ? true
            : undefined,
        10_000,
      );
    } finally {
      // An orphan the old code left: this test's runner only, found by its work directory.
      for (const pid of await processesWith(join(scratch, `work-${runnerId}`)))
        process.kill(pid, "SIGKILL");
    }
  }, 60_000);
});

/** Pids of processes whose command line contains `text`. */
async function processesWith(text: string): Promise<number[]> {
  const pids: number[] = [];
  for (const entry of await readdir("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    const cmdline = await readFile(`/proc/${entry}/cmdline`, "utf8").catch(() => "");
    if (cmdline.includes(text) && Number(entry) !== process.pid) pids.push(Number(entry));
  }
  return pids;
}
