import "reflect-metadata";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { eventually } from "../support/actors.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";
import { specFor, startTestRunner, type TestRunner } from "../support/runner-agent.js";
import { readEntries } from "../support/streams.js";
import { processesOf } from "../../src/runner/executors/proc.js";

// A job's processes end with the job (hostile-jobs issue, item 1): on the process executor as root
// each job runs as a uid of its own, and at its end every process of that uid is killed, whatever
// it did with sessions, process groups or its output pipes.
const cp = useControlPlane();
const { admin } = cp;
const isRoot = process.getuid?.() === 0;
let runner: TestRunner;
const ws = "escape";

async function run(script: string, timeoutSeconds = 60) {
  const reply = await admin.enqueue({
    workspaceId: ws,
    spec: specFor("process", { argv: ["sh", "-c", script], timeoutSeconds }),
  });
  expect(reply.status, reply.text).toBe(200);
  const jobId = reply.json.job.id as string;
  // Settled well before the escaped sleep of 100 or 120 s could end by itself.
  const job = await eventually(
    `job ${jobId} to settle`,
    async () => {
      const j = (await admin.job(jobId)).json.job;
      return ["succeeded", "failed", "cancelled"].includes(j.state) ? j : undefined;
    },
    30_000,
  );
  const logs = await readEntries(admin, jobId, "logs", "?pageSize=100");
  const uidLine = logs
    .map((e) => (e.data as { text: string }).text)
    .find((t) => /^uid=\d+$/.test(t));
  expect(uidLine, JSON.stringify(logs)).toBeDefined();
  return { job, uid: Number(uidLine!.slice(4)) };
}

describe.runIf(isRoot)(`a job's processes end with it (${databaseKind})`, () => {
  beforeAll(async () => {
    runner = await startTestRunner(cp, { runnerId: "esc1", workspaceId: ws, executor: "process" });
  });
  afterAll(() => runner?.close());

  it("a daemon the job detached with setsid is gone once the job succeeded", async () => {
    const { job, uid } = await run(
      "echo uid=$(id -u); setsid sh -c 'exec sleep 100' </dev/null >/dev/null 2>&1 & exit 0",
    );
    expect(job.state).toBe("succeeded");
    await eventually(
      `no process of uid ${uid} left`,
      async () => (processesOf(uid).length === 0 ? true : undefined),
      5_000,
    );
  });

  it("a detached child holding the job's stdout neither keeps the job running nor outlives it", async () => {
    const { job, uid } = await run("echo uid=$(id -u); setsid sh -c 'sleep 120' & echo started");
    expect(job.state).toBe("succeeded");
    expect(processesOf(uid)).toEqual([]);
  });

  it("at its timeout, a job whose detached child holds stdout is failed and all of it killed", async () => {
    const { job, uid } = await run("echo uid=$(id -u); setsid sh -c 'sleep 120' & sleep 100", 2);
    expect(job.state).toBe("failed");
    expect(job.failure?.reason ?? job.error?.code).toMatch(/timeout/);
    expect(processesOf(uid)).toEqual([]);
  });
});
