import "reflect-metadata";
import { sql } from "kysely";
import { describe, expect, it } from "vitest";
import { jobBody, registeredRunner, type RunnerActor } from "../support/actors.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";

// Fair shares (issue 49): at equal priority a workspace's fairness keys are served in proportion to
// their weights, each key's jobs in order; the rule is forelead_claim's order (forelead_fair_tag).
const cp = useControlPlane();
const { admin } = cp;

/** Enqueues `n` jobs of `key` in `workspaceId` through the batch route, 1,000 at a time. */
async function enqueueMany(workspaceId: string, key: string, n: number): Promise<string[]> {
  const ids: string[] = [];
  for (let done = 0; done < n; done += 1000) {
    const jobs = Array.from({ length: Math.min(1000, n - done) }, () =>
      jobBody({ workspaceId, fairnessKey: key }),
    );
    const reply = await admin.rest.request("POST", "/v1/admin/jobs:batch", {
      apiVersion: "v1",
      jobs,
    });
    expect(reply.status, reply.text).toBe(200);
    ids.push(...(reply.json.jobs as Array<{ id: string }>).map((j) => j.id));
  }
  return ids;
}

/** Claims and completes `n` jobs one at a time; returns the started jobs' ids, in order. */
async function drain(runner: RunnerActor, n: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const claim = await runner.claim({ waitSeconds: 0 });
    expect(claim.status, claim.text).toBe(200);
    ids.push(claim.json.job.id);
    const done = await runner.complete(claim.json.job.id, claim.json.token);
    expect(done.status, done.text).toBe(200);
  }
  return ids;
}

/** The key of each id, by the enqueued ids of each key. */
function keysOf(started: readonly string[], byKey: Record<string, readonly string[]>): string[] {
  const keyOf = new Map(Object.entries(byKey).flatMap(([k, ids]) => ids.map((id) => [id, k])));
  return started.map((id) => keyOf.get(id) ?? "");
}

function setWeight(key: string, body: Record<string, unknown>) {
  return admin.rest.request("PUT", `/v1/admin/fairness-keys/${encodeURIComponent(key)}`, {
    apiVersion: "v1",
    ...body,
  });
}

describe(`fair shares (${databaseKind})`, () => {
  it("a key arriving behind another key's 2,000 jobs starts all 20 of its jobs within the next 41 claims", async () => {
    const ws = "fair-burst";
    const runner = await registeredRunner(cp, "fair-burst-1", ws);
    const a = await enqueueMany(ws, "tenant-a", 2000);
    const b = await enqueueMany(ws, "tenant-b", 20);
    // The keys alternate from B's arrival on: A's tags are 1..2,000, B's 2..21 (A, then AB, AB…).
    const started = await drain(runner, 41);
    const keys = keysOf(started, { a, b });
    expect(keys.join("")).toBe("a" + "ab".repeat(20));
    // Each key's own jobs keep their order, oldest first.
    expect(started.filter((_, i) => keys[i] === "a")).toEqual(a.slice(0, 21));
    expect(started.filter((_, i) => keys[i] === "b")).toEqual(b);
    const view = await admin.job(a[0]!);
    expect(view.json.job.fairnessKey).toBe("tenant-a");
    // The stats per key: how many started, and their waits.
    const stats = await admin.rest.request("GET", `/v1/admin/stats?since=1h&workspaceId=${ws}`);
    expect(stats.status, stats.text).toBe(200);
    const perKey = stats.json.workspaces[0].fairnessKeys;
    expect(perKey.map((k: { key: string; started: string }) => [k.key, k.started])).toEqual([
      ["tenant-a", "21"],
      ["tenant-b", "20"],
    ]);
    for (const k of perKey) expect(k.waitP95Seconds).toBeGreaterThanOrEqual(k.waitP50Seconds);
  });

  it("weights 3:1 start jobs 3:1 (within 5 %) over 1,000 claims, set without a restart", async () => {
    const ws = "fair-weights";
    const runner = await registeredRunner(cp, "fair-weights-1", ws);
    const set = await setWeight("heavy", { workspaceId: ws, weight: 3 });
    expect(set.status, set.text).toBe(200);
    expect(set.json.fairnessKey).toMatchObject({ workspaceId: ws, key: "heavy", weight: 3 });
    const byKey = {
      heavy: await enqueueMany(ws, "heavy", 1000),
      light: await enqueueMany(ws, "light", 1000),
    };
    const started = keysOf(await drain(runner, 1000), byKey);
    const heavy = started.filter((k) => k === "heavy").length;
    const light = started.filter((k) => k === "light").length;
    expect(heavy + light).toBe(1000);
    expect(Math.abs(heavy / light - 3) / 3).toBeLessThanOrEqual(0.05);
    const list = await admin.rest.request("GET", `/v1/admin/fairness-keys?workspaceId=${ws}`);
    expect(list.status, list.text).toBe(200);
    expect(list.json.fairnessKeys).toMatchObject([
      { key: "heavy", weight: 3, queued: 1000 - heavy },
      { key: "light", weight: 1, queued: 1000 - light },
    ]);
  }, 600_000);

  it("jobs without a key keep the order of priority, then age, and go before keyed jobs of their priority", async () => {
    const ws = "fair-mixed";
    const runner = await registeredRunner(cp, "fair-mixed-1", ws);
    const ids: string[] = [];
    for (const body of [
      { fairnessKey: "k1" },
      {},
      { priority: 5, fairnessKey: "k1" },
      {},
      { priority: 5 },
    ]) {
      const reply = await admin.enqueue({ workspaceId: ws, ...body });
      expect(reply.status, reply.text).toBe(200);
      ids.push(reply.json.job.id);
    }
    const order: string[] = [];
    for (let i = 0; i < ids.length; i++) {
      const claim = await runner.claim({ waitSeconds: 0 });
      expect(claim.status, claim.text).toBe(200);
      order.push(claim.json.job.id);
      await runner.complete(claim.json.job.id, claim.json.token);
    }
    expect(order).toEqual([ids[4], ids[2], ids[1], ids[3], ids[0]]);
  });

  it("a pipeline step's job carries the step's fairness key", async () => {
    const reply = await admin.rest.request("POST", "/v1/admin/pipelines", {
      apiVersion: "v1",
      workspaceId: "fair-steps",
      name: "p",
      steps: [
        {
          name: "build",
          labels: ["linux"],
          spec: { image: "busybox", argv: ["true"] },
          fairnessKey: "tenant-s",
        },
      ],
    });
    expect(reply.status, reply.text).toBe(200);
    const jobId = reply.json.pipeline.steps[0].jobId as string;
    expect((await admin.job(jobId)).json.job.fairnessKey).toBe("tenant-s");
  });

  it("bad input is refused with 400 naming it, and nothing is stored", async () => {
    const ws = "fair-bad";
    const count = async () =>
      (
        await sql<{ n: number }>`select
          (select count(*) from fairness_keys where workspace_id = ${ws})
          + (select count(*) from jobs where workspace_id = ${ws}) as n`.execute(cp.plane.store.db)
      ).rows[0]!.n;
    const fractional = await setWeight("k", { workspaceId: ws, weight: 1.5 });
    expect(fractional.status, fractional.text).toBe(400);
    for (const weight of [0, -1, 1001]) {
      const reply = await setWeight("k", { workspaceId: ws, weight });
      expect(reply.status, reply.text).toBe(400);
      expect(reply.json.message).toContain("weight must be a whole number from 1 to 1000");
    }
    const badKey = await setWeight("a".repeat(129), { workspaceId: ws, weight: 2 });
    expect(badKey.status, badKey.text).toBe(400);
    expect(badKey.json.message).toMatch(/^key "a+" is not a valid id/);
    const spaced = await setWeight("a b", { workspaceId: ws, weight: 2 });
    expect(spaced.status, spaced.text).toBe(400);
    const noWorkspace = await setWeight("k", { weight: 2 });
    expect(noWorkspace.status, noWorkspace.text).toBe(400);
    for (const fairnessKey of ["a b", "x".repeat(129), "tenant/a"]) {
      const reply = await admin.enqueue({ workspaceId: ws, fairnessKey });
      expect(reply.status, reply.text).toBe(400);
      expect(reply.json.message).toMatch(/^fairnessKey ".*" is not a valid id/);
    }
    expect(Number(await count())).toBe(0);
  });
});
