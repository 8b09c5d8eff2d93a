import { randomUUID } from "node:crypto";
import { mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { sql } from "kysely";
import { describe, expect, it } from "vitest";
import { readPipelineFile } from "../../src/cli/pipelines.js";
import { registeredRunner, type RunnerActor } from "../support/actors.js";
import type { RestReply } from "../support/clients.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";

// A pipeline step takes EnqueueJob's scheduling and requirement fields (issue 20 item 5): a
// concurrency group, a delay counted from when the step becomes ready, backoff and requirements.
const cp = useControlPlane();
const { admin } = cp;

const post = (path: string, body: Record<string, unknown> = {}) =>
  admin.rest.request("POST", path, { apiVersion: "v1", ...body });
const step = (name: string, needs: string[] = [], extra: Record<string, unknown> = {}) => ({
  name,
  needs,
  labels: ["linux"],
  spec: { image: "busybox", argv: ["true"], timeoutSeconds: 60 },
  ...extra,
});
interface PipelineJson {
  id: string;
  state: string;
  steps: Array<{ name: string; state: string; jobId?: string }>;
}

async function submit(workspaceId: string, steps: unknown[]): Promise<PipelineJson> {
  const reply = await post("/v1/admin/pipelines", { workspaceId, name: "sched", steps });
  expect(reply.status, reply.text).toBe(200);
  return reply.json.pipeline as PipelineJson;
}
async function pipeline(pid: string): Promise<PipelineJson> {
  const reply = await admin.rest.request("GET", `/v1/admin/pipelines/${pid}`);
  expect(reply.status, reply.text).toBe(200);
  return reply.json.pipeline as PipelineJson;
}
async function getJob(jobId: string) {
  const reply = await admin.job(jobId);
  expect(reply.status, reply.text).toBe(200);
  return reply.json.job as RestReply["json"];
}
const stepJob = (p: PipelineJson, name: string) => p.steps.find((s) => s.name === name)!.jobId!;
async function claimNow(
  runner: RunnerActor,
  waitSeconds = 0,
): Promise<{ jobId: string; token: string } | undefined> {
  const reply = await runner.claim({ waitSeconds });
  if (reply.status === 204) return undefined;
  expect(reply.status, reply.text).toBe(200);
  return { jobId: reply.json.job.id as string, token: reply.json.token as string };
}
async function complete(runner: RunnerActor, lease: { jobId: string; token: string }) {
  const reply = await runner.complete(lease.jobId, lease.token);
  expect(reply.status, reply.text).toBe(200);
}
const freshWorkspace = () => `s${randomUUID().slice(0, 8)}`;

describe(`pipeline steps with scheduling fields (${databaseKind})`, () => {
  it("three parallel steps sharing a concurrency key of limit 1 never run two at once", async () => {
    const w = freshWorkspace();
    const runners = await Promise.all(
      [1, 2, 3].map((i) => registeredRunner(cp, `${w}-r${i}`, w, { slots: 2 })),
    );
    const group = { concurrencyKey: "deploy-api", concurrencyLimit: 1 };
    const p = await submit(w, [step("a", [], group), step("b", [], group), step("c", [], group)]);
    const jobIds = ["a", "b", "c"].map((n) => stepJob(p, n));
    for (const id of jobIds)
      expect(await getJob(id)).toMatchObject({
        state: "queued",
        concurrencyKey: "deploy-api",
        concurrencyLimit: 1,
      });
    const ran: string[] = [];
    for (let round = 0; round < 3; round++) {
      // Every runner asks; exactly one claim is granted while a step of the group holds it.
      const leases = [];
      for (const r of runners)
        for (let i = 0; i < 2; i++) leases.push({ runner: r, lease: await claimNow(r) });
      const granted = leases.filter((l) => l.lease);
      expect(granted.length, `round ${round}`).toBe(1);
      const { runner, lease } = granted[0]!;
      const running = await cp.plane.store.db
        .selectFrom("jobs")
        .select(sql<number>`count(*)::int`.as("n"))
        .where("id", "in", jobIds)
        .where("state", "=", "running")
        .executeTakeFirstOrThrow();
      expect(running.n).toBe(1);
      for (const other of jobIds.filter((id) => id !== lease!.jobId && !ran.includes(id))) {
        expect((await getJob(other)).waiting).toMatchObject({
          code: "concurrency_group",
          concurrencyKey: "deploy-api",
          concurrencyRunning: 1,
        });
      }
      ran.push(lease!.jobId);
      await complete(runner, lease!);
    }
    expect(new Set(ran)).toEqual(new Set(jobIds));
    // The leases never overlap: each was issued after the previous one's job settled.
    const leases = await cp.plane.store.db
      .selectFrom("leases")
      .select(["job_id", "issued_at"])
      .where("job_id", "in", jobIds)
      .orderBy("issued_at")
      .execute();
    expect(leases.map((l) => l.job_id)).toEqual(ran);
    const settled = await Promise.all(
      ran.map(async (id) => Date.parse((await getJob(id)).settledAt)),
    );
    for (let i = 1; i < leases.length; i++)
      expect(new Date(leases[i]!.issued_at).getTime()).toBeGreaterThanOrEqual(settled[i - 1]!);
    expect((await pipeline(p.id)).state).toBe("succeeded");
  });

  it(
    "a step's delaySeconds counts from when its needs settled: not claimable " +
      "before, claimed by a waiting claim after",
    async () => {
      const w = freshWorkspace();
      const runner = await registeredRunner(cp, `${w}-r`, w, { slots: 2 });
      const p = await submit(w, [step("build"), step("deploy", ["build"], { delaySeconds: 2 })]);
      const build = (await claimNow(runner))!;
      expect(build.jobId).toBe(stepJob(p, "build"));
      await complete(runner, build);
      const readyAt = Date.parse((await getJob(build.jobId)).settledAt);
      const after = await pipeline(p.id);
      expect(after.steps.find((s) => s.name === "deploy")!.state).toBe("queued");
      const deploy = await getJob(stepJob(after, "deploy"));
      // The step's job was enqueued when it became ready, in the settle of its need; the delay runs
      // from there.
      expect(Date.parse(deploy.createdAt)).toBeGreaterThanOrEqual(readyAt);
      expect(Date.parse(deploy.claimableAt) - Date.parse(deploy.createdAt)).toBe(2_000);
      expect(deploy.waiting).toMatchObject({ code: "scheduled", until: deploy.claimableAt });
      expect(await claimNow(runner)).toBeUndefined();
      const lease = (await claimNow(runner, 20))!;
      expect(lease.jobId).toBe(deploy.id);
      const issued = await cp.plane.store.db
        .selectFrom("leases")
        .select("issued_at")
        .where("job_id", "=", deploy.id)
        .executeTakeFirstOrThrow();
      expect(new Date(issued.issued_at).getTime()).toBeGreaterThanOrEqual(
        Date.parse(deploy.claimableAt),
      );
      await complete(runner, lease);
    },
  );

  it(
    "a step's requirements are matched (an arm64 step never goes to an amd64 " +
      "runner); runAt and backoff reach its job",
    async () => {
      const w = freshWorkspace();
      const amd = await registeredRunner(cp, `${w}-amd`, w, { architecture: "amd64" });
      const runAt = new Date(Date.now() + 3_600_000);
      runAt.setMilliseconds(0);
      const p = await submit(w, [
        step("arm", [], {
          requirements: { architecture: "arm64" },
          backoff: { initialSeconds: 5, multiplier: 3, maxSeconds: 60 },
        }),
        step("later", [], { runAt: runAt.toISOString() }),
      ]);
      const arm = await getJob(stepJob(p, "arm"));
      expect(arm).toMatchObject({
        requirements: { architecture: "arm64" },
        backoff: { initialSeconds: 5, multiplier: 3, maxSeconds: 60 },
      });
      expect(arm.waiting).toMatchObject({
        code: "unmet_requirements",
        unmetRequirement: "architecture arm64",
      });
      expect(Date.parse((await getJob(stepJob(p, "later"))).claimableAt)).toBe(runAt.getTime());
      expect(await claimNow(amd)).toBeUndefined();
      const armRunner = await registeredRunner(cp, `${w}-arm`, w, { architecture: "arm64" });
      const lease = (await claimNow(armRunner))!;
      expect(lease.jobId).toBe(arm.id);
    },
  );

  it("a step's scheduling fields are checked by the enqueue's rules, the step named", async () => {
    const w = freshWorkspace();
    for (const [extra, message] of [
      [
        { runAt: new Date(Date.now() + 60_000).toISOString(), delaySeconds: 5 },
        /^steps\[1\] \(b\): runAt and delaySeconds exclude each other/,
      ],
      [{ concurrencyLimit: 2 }, /^steps\[1\] \(b\): concurrencyLimit needs a concurrencyKey/],
      [
        { requirements: { executionKind: "vm" } },
        /^steps\[1\] \(b\): requirements.executionKind "vm" is not an execution kind/,
      ],
    ] as const) {
      const reply = await post("/v1/admin/pipelines", {
        workspaceId: w,
        name: "bad",
        steps: [step("a"), step("b", ["a"], extra)],
      });
      expect(reply.status, reply.text).toBe(400);
      expect(reply.json.message, reply.text).toMatch(message);
    }
  });

  it("the YAML file of `forelead pipelines submit` takes the same fields", async () => {
    const dir = await mkdtemp(join(tmpdir(), "pipeline-yaml-"));
    const file = join(dir, "p.yaml");
    await writeFile(
      file,
      [
        "workspaceId: w1",
        "name: deploys",
        "steps:",
        "  - name: deploy",
        '    spec: {image: busybox, argv: ["true"]}',
        "    delaySeconds: 30",
        "    concurrencyKey: deploy-api",
        "    concurrencyLimit: 1",
        "    backoff: {initialSeconds: 2, multiplier: 2}",
        "    requirements: {architecture: arm64, features: [cancel-v1]}",
        "",
      ].join("\n"),
    );
    const req = await readPipelineFile(file);
    expect(req.steps[0]).toMatchObject({
      delaySeconds: 30n,
      concurrencyKey: "deploy-api",
      concurrencyLimit: 1,
      backoff: { initialSeconds: 2, multiplier: 2 },
      requirements: { architecture: "arm64", features: ["cancel-v1"] },
    });
  });
});
