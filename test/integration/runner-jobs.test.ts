import "reflect-metadata";
import { describe, expect, it } from "vitest";
import { eventually } from "../support/actors.js";
import { processesOf } from "../../src/runner/executors/proc.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";
import {
  executorsUnderTest,
  specFor,
  startTestRunner,
  type ExecutorKind,
  type TestRunner,
} from "../support/runner-agent.js";

// Leases of 6 s: renewals (every ~2 s) carry cancellations to the runner within seconds.
const cp = useControlPlane({ leaseSeconds: 6 });
const { admin } = cp;
let n = 0;
/**
 * Runner ids unique to this run: Docker resources are found by the forelead.runner label, and other
 * suites may share the engine.
 */
const tag = Math.random().toString(36).slice(2, 8);
const executors = await executorsUnderTest();
const isRoot = process.getuid?.() === 0;

/** A runner of its own in a workspace of its own, so tests never take each other's jobs. */
async function freshRunner(
  executor: ExecutorKind,
  slots = 1,
): Promise<{ runner: TestRunner; ws: string }> {
  const ws = `rj${++n}`;
  return {
    runner: await startTestRunner(cp, {
      runnerId: `r${n}-${tag}`,
      workspaceId: ws,
      executor,
      slots,
    }),
    ws,
  };
}

async function enqueue(
  ws: string,
  executor: ExecutorKind,
  spec: Record<string, unknown>,
  extra: Record<string, unknown> = {},
): Promise<string> {
  const reply = await admin.enqueue({ workspaceId: ws, spec: specFor(executor, spec), ...extra });
  expect(reply.status, reply.text).toBe(200);
  return reply.json.job.id;
}

async function settled(jobId: string, timeoutMs = 20_000) {
  return eventually(
    `job ${jobId} to settle`,
    async () => {
      const job = (await admin.job(jobId)).json.job;
      return ["succeeded", "failed", "cancelled"].includes(job.state) ? job : undefined;
    },
    timeoutMs,
  );
}

const types = (runner: TestRunner, jobId: string) =>
  runner.recorded.job(jobId).events.map((e) => e.type);

describe.each(executors)(`jobs on the %s executor (${databaseKind})`, (executor) => {
  it("a job that exits 0 succeeds, with its stdout and stderr lines in order", async () => {
    const { runner, ws } = await freshRunner(executor);
    try {
      const script =
        "i=1; while [ $i -le 200 ]; do echo line $i; i=$((i+1)); done; echo oops >&2; printf 'no newline'";
      const jobId = await enqueue(ws, executor, { argv: ["sh", "-c", script] });
      const job = await settled(jobId);
      expect(job).toMatchObject({ state: "succeeded", exitCode: 0, attempts: 1 });
      const logs = runner.recorded.job(jobId).logs;
      const stdout = logs.filter((l) => l.stream === "stdout").map((l) => l.text);
      expect(stdout).toEqual([
        ...Array.from({ length: 200 }, (_, i) => `line ${i + 1}`),
        "no newline",
      ]);
      expect(logs.filter((l) => l.stream === "stderr").map((l) => l.text)).toEqual(["oops"]);
      expect(types(runner, jobId)).toEqual(["job.started", "job.exited"]);
      expect(runner.recorded.job(jobId).events[1]).toMatchObject({
        type: "job.exited",
        exitCode: 0,
      });
    } finally {
      await runner.close();
    }
  });

  it("a job that exits non-zero fails with its exit code", async () => {
    const { runner, ws } = await freshRunner(executor);
    try {
      const jobId = await enqueue(ws, executor, { argv: ["sh", "-c", "echo failing; exit 3"] });
      const job = await settled(jobId);
      expect(job).toMatchObject({
        state: "failed",
        exitCode: 3,
        attempts: 1,
        error: { code: "exit_code" },
      });
      expect(runner.recorded.job(jobId).events.at(-1)).toMatchObject({
        type: "job.exited",
        exitCode: 3,
      });
    } finally {
      await runner.close();
    }
  });

  it("a job over its timeout is killed and fails with error code timeout", async () => {
    const { runner, ws } = await freshRunner(executor);
    try {
      const jobId = await enqueue(ws, executor, {
        argv: ["sh", "-c", "echo waiting; sleep 60"],
        timeoutSeconds: 1,
      });
      const job = await settled(jobId);
      expect(job).toMatchObject({ state: "failed", attempts: 1, error: { code: "timeout" } });
      expect(job.error.retryable ?? false).toBe(false);
      expect(types(runner, jobId)).toEqual(["job.started", "job.timeout", "job.exited"]);
      expect(runner.recorded.job(jobId).events[1]).toMatchObject({ timeoutSeconds: 1 });
    } finally {
      await runner.close();
    }
  });

  it("a job cancelled while it runs is stopped and settled as cancelled", async () => {
    const { runner, ws } = await freshRunner(executor);
    try {
      const jobId = await enqueue(ws, executor, {
        argv: ["sh", "-c", "echo pid $$ uid $(id -u); sleep 60"],
      });
      const pidLine = await runner.waitForLine(jobId, /^pid \d+ uid \d+$/);
      expect((await admin.cancel(jobId)).status).toBe(200);
      const job = await settled(jobId);
      expect(job).toMatchObject({ state: "cancelled", attempts: 1 });
      expect(types(runner, jobId)).toEqual(["job.started", "job.cancelled", "job.exited"]);
      if (executor === "process")
        // As root the job has a uid of its own and a PID namespace ($$ is its pid there): none of
        // its uid's processes is left; otherwise its process group's leader is gone.
        if (process.getuid?.() === 0)
          expect(processesOf(Number(pidLine.text.split(" ")[3]))).toEqual([]);
        else expect(processAlive(Number(pidLine.text.split(" ")[1]))).toBe(false);
      await eventually("the job's resources to be gone", async () =>
        (await runner.executor.resources()).length === 0 ? true : undefined,
      );
    } finally {
      await runner.close();
    }
  });

  it("a spec that needs more than the runner has fails with incompatible_spec and is not retried", async () => {
    const { runner, ws } = await freshRunner(executor);
    try {
      const jobId = await enqueue(
        ws,
        executor,
        { argv: ["true"], memoryBytes: String(1024 ** 5) },
        { maxAttempts: 3 },
      );
      const job = await settled(jobId);
      expect(job).toMatchObject({
        state: "failed",
        attempts: 1,
        error: { code: "incompatible_spec" },
      });
      expect(job.error.message).toContain("memory");
      expect(job.error.retryable ?? false).toBe(false);
      expect(runner.recorded.jobs.has(jobId)).toBe(false); // never started
    } finally {
      await runner.close();
    }
  });

  it.skipIf(executor === "process" && !isRoot)(
    "two jobs running at once on one runner cannot see each other's files",
    async () => {
      const { runner, ws } = await freshRunner(executor, 2);
      try {
        const a = await enqueue(ws, executor, {
          argv: [
            "sh",
            "-c",
            "echo secret-a > a.txt; echo secret-a > output/a.txt; echo dir $(pwd); sleep 60",
          ],
        });
        const dirA = (await runner.waitForLine(a, /^dir /)).text.slice(4);
        const paths = ["a.txt", "output/a.txt", `${dirA}/a.txt`, `${dirA}/output/a.txt`];
        const probe =
          `for f in ${paths.join(" ")}; do if cat "$f" >/dev/null 2>&1; then echo ` +
          `"visible $f"; else echo "hidden $f"; fi; done; echo "entries $(ls -A ` +
          `output | wc -l)"`;
        const b = await enqueue(ws, executor, { argv: ["sh", "-c", probe] });
        expect((await settled(b)).state).toBe("succeeded");
        expect((await admin.job(a)).json.job.state).toBe("running"); // a was running all along
        const lines = runner.recorded.job(b).logs.map((l) => l.text.trim());
        expect(lines).toEqual([...paths.map((p) => `hidden ${p}`), "entries 0"]);
        await admin.cancel(a);
        await settled(a);
      } finally {
        await runner.close();
      }
    },
  );

  it("no lease token and no secret env value appears in any event, log line or runner log line", async () => {
    const { runner, ws } = await freshRunner(executor);
    try {
      const secret = "s3cr3t-value-4711";
      const jobId = await enqueue(ws, executor, {
        argv: ["sh", "-c", "echo token=$API_TOKEN; echo plain=$PLAIN; exit 1"],
        env: { API_TOKEN: secret, PLAIN: "visible" },
      });
      await settled(jobId);
      const recorded = runner.recorded.job(jobId);
      expect(recorded.leaseTokens).toHaveLength(1);
      const token = recorded.leaseTokens[0]!;
      expect(token.length).toBeGreaterThan(20);
      expect(recorded.logs.map((l) => l.text)).toEqual(["token=***", "plain=visible"]);
      const everything = JSON.stringify([recorded.logs, recorded.events, runner.log]);
      expect(everything).not.toContain(secret);
      expect(everything).not.toContain(token);
    } finally {
      await runner.close();
    }
  });
});

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
