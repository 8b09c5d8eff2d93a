import "reflect-metadata";
import { createHash } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { eventually } from "../support/actors.js";
import { loseLease, registerRepository } from "../support/code-actors.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";
import { runnerJobs } from "../support/runner-jobs.js";
import { createTestOrigin, type TestOrigin } from "../support/git-repos.js";
import { executorsUnderTest } from "../support/runner-agent.js";

// The agent wired to the code routes (checkout before the job) and to artifact uploads (output
// after it). Leases of 6 s: renewals (every ~2 s) carry a cancellation to the runner within
// seconds.
const cp = useControlPlane({ leaseSeconds: 6 });
const { admin } = cp;
let origin: TestOrigin;
/**
 * Runner ids unique to this run: Docker resources are found by the forelead.runner label, and other
 * suites may share the engine.
 */
const tag = Math.random().toString(36).slice(2, 8);
const executors = await executorsUnderTest();

beforeAll(async () => {
  origin = await createTestOrigin();
  const reg = await registerRepository(admin, "app", origin.path);
  expect(reg.status, reg.text).toBe(200);
});
afterAll(async () => {
  await origin?.remove();
});

const { freshRunner, enqueue, settled } = runnerJobs(cp, "rco");

const sha256 = (bytes: Buffer | string) =>
  `sha256:${createHash("sha256").update(bytes).digest("hex")}`;

/** GET an artifact's bytes over REST, keeping the body binary. */
function download(jobId: string, name: string): Promise<{ status: number; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const stream = admin.rest.session.request({
      ":method": "GET",
      ":path": `/v1/admin/jobs/${jobId}/artifacts/content?name=${encodeURIComponent(name)}`,
    });
    const chunks: Buffer[] = [];
    let status = 0;
    stream.on("response", (h) => (status = Number(h[":status"])));
    stream.on("data", (c: Buffer) => chunks.push(c));
    stream.on("error", reject);
    stream.on("end", () => resolve({ status, body: Buffer.concat(chunks) }));
    stream.end();
  });
}

describe.each(executors)(`code and output on the %s executor (${databaseKind})`, (executor) => {
  it(
    "a checkout job runs on the pinned tree of its branch: the job reads the " +
      "repository's files in workspace/",
    async () => {
      const marker = `pinned-${tag}-${executor}`;
      const commit = await origin.commit(`wire-${executor}`, { "src/marker.txt": `${marker}\n` });
      const { runner, ws } = await freshRunner(executor);
      try {
        const jobId = await enqueue(
          ws,
          executor,
          { argv: ["sh", "-c", "cat workspace/src/marker.txt && ls workspace"] },
          { repository: "app", targetBranch: `wire-${executor}` },
        );
        const job = await settled(jobId);
        expect(job, JSON.stringify(job)).toMatchObject({
          state: "succeeded",
          kind: "checkout",
          baseCommit: commit,
        });
        const stdout = runner.recorded
          .job(jobId)
          .logs.filter((l) => l.stream === "stdout")
          .map((l) => l.text);
        expect(stdout).toEqual([marker, "README.md", "src"]);
      } finally {
        await runner.close();
      }
    },
  );

  it(
    "a command job that writes files to output/ succeeds with them listed as " +
      "artifacts, downloadable byte for byte",
    async () => {
      const { runner, ws } = await freshRunner(executor);
      try {
        const script =
          "mkdir -p output/reports && printf 'hello output' > output/hello.txt && " +
          "printf '<testsuite/>' > output/reports/junit.xml && ln -s /etc/passwd " +
          "output/link";
        const jobId = await enqueue(ws, executor, { argv: ["sh", "-c", script] });
        const job = await settled(jobId);
        expect(job, JSON.stringify(job)).toMatchObject({ state: "succeeded", exitCode: 0 });
        const expected = { "hello.txt": "hello output", "reports/junit.xml": "<testsuite/>" };
        expect(job.artifacts.map((a: { name: string }) => a.name)).toEqual(Object.keys(expected));
        for (const [name, content] of Object.entries(expected)) {
          expect(job.artifacts.find((a: { name: string }) => a.name === name)).toMatchObject({
            digest: sha256(content),
            size: String(content.length),
          });
          const got = await download(jobId, name);
          expect(got.status).toBe(200);
          expect(got.body.toString()).toBe(content);
        }
        const uploaded = runner.recorded.job(jobId).events.find((e) => e.type === "job.artifacts");
        expect(uploaded).toMatchObject({ count: 2, skipped: [{ name: "link" }] });
      } finally {
        await runner.close();
      }
    },
  );

  it("a job cancelled while it runs keeps nothing: its output is not uploaded", async () => {
    const { runner, ws } = await freshRunner(executor);
    try {
      const jobId = await enqueue(ws, executor, {
        argv: ["sh", "-c", "printf partial > output/partial.txt; echo ready; sleep 60"],
      });
      await runner.waitForLine(jobId, /^ready$/);
      expect((await admin.cancel(jobId)).status).toBe(200);
      const job = await settled(jobId);
      expect(job).toMatchObject({ state: "cancelled" });
      expect(job.artifacts ?? []).toEqual([]);
      expect(runner.recorded.job(jobId).events.map((e) => e.type)).not.toContain("job.artifacts");
    } finally {
      await runner.close();
    }
  });

  it("a job whose lease is lost uploads nothing and is not completed", async () => {
    const { runner, ws } = await freshRunner(executor);
    try {
      const jobId = await enqueue(ws, executor, {
        argv: ["sh", "-c", "printf partial > output/partial.txt; echo ready; sleep 60"],
      });
      await runner.waitForLine(jobId, /^ready$/);
      await loseLease(cp, jobId);
      await eventually("the runner to declare the lease lost", async () =>
        runner.log.some((l) => l.includes(`job ${jobId}: lease lost`)) ? true : undefined,
      );
      await runner.close();
      expect(
        runner.log.filter(
          (l) => l.includes(`job ${jobId}: uploaded`) || l.includes(`job ${jobId}: complet`),
        ),
      ).toEqual([]);
      expect(runner.recorded.job(jobId).events.map((e) => e.type)).not.toContain("job.artifacts");
      const job = (await admin.job(jobId)).json.job;
      expect(job.artifacts ?? []).toEqual([]);
    } finally {
      await runner.close();
    }
  });

  it("a job that writes nothing to output/ completes without artifacts", async () => {
    const { runner, ws } = await freshRunner(executor);
    try {
      const jobId = await enqueue(ws, executor, { argv: ["sh", "-c", "echo nothing kept"] });
      const job = await settled(jobId);
      expect(job).toMatchObject({ state: "succeeded" });
      expect(job.artifacts ?? []).toEqual([]);
      expect(runner.recorded.job(jobId).events.map((e) => e.type)).toEqual([
        "job.started",
        "job.exited",
      ]);
    } finally {
      await runner.close();
    }
  });
});
