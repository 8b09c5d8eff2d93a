import "reflect-metadata";
import { describe, expect, it } from "vitest";
import { registeredRunner } from "../support/actors.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";

const cp = useControlPlane();
const { admin } = cp;

/** Enqueues into `workspaceId`; the reply's job must be queued. */
async function enqueue(workspaceId: string, labels: string[] = ["linux"]) {
  const reply = await admin.enqueue({ workspaceId, labels });
  expect(reply.status, reply.text).toBe(200);
  expect(reply.json.job.state).toBe("queued");
  return reply.json.job as { id: string; waiting?: Record<string, unknown> };
}

/** GetJob's waiting field. */
async function waitingOf(jobId: string) {
  const reply = await admin.job(jobId);
  expect(reply.status, reply.text).toBe(200);
  return reply.json.job.waiting as Record<string, unknown> | undefined;
}

describe(`why a queued job waits (${databaseKind})`, () => {
  it(
    "no_runner: a job enqueued into a workspace with no registered runner " +
      "says so in the enqueue reply and in GetJob",
    async () => {
      const job = await enqueue("wait-typo");
      expect(job.waiting).toEqual({
        code: "no_runner",
        message: expect.stringContaining('no runner is registered in workspace "wait-typo"'),
      });
      expect(job.waiting!.message).toMatch(/typo/);
      expect(await waitingOf(job.id)).toEqual(job.waiting);
    },
  );

  it("missing_labels: no runner has the job's labels; the missing ones are named from the closest runner", async () => {
    await registeredRunner(cp, "wl-1", "wait-labels", { labels: ["linux"] });
    await registeredRunner(cp, "wl-2", "wait-labels", { labels: ["linux", "gpu"] });
    const job = await enqueue("wait-labels", ["linux", "gpu", "cuda"]);
    expect(job.waiting).toEqual({
      code: "missing_labels",
      missingLabels: ["cuda"],
      message:
        'no runner in workspace "wait-labels" has labels cuda,gpu,linux; the ' +
        'closest, "wl-2", lacks cuda: register one with --labels including cuda, ' +
        "or drop the label from the job",
    });
    expect(await waitingOf(job.id)).toEqual(job.waiting);
  });

  it("workspace_paused: a paused workspace comes first, with who paused it and how to resume", async () => {
    await registeredRunner(cp, "wp-1", "wait-paused");
    await cp.plane.store.db
      .insertInto("workspace_pauses")
      .values({
        workspace_id: "wait-paused",
        paused_by: "spiffe://test/admins/ops",
        reason: "maintenance",
      })
      .execute();
    const job = await enqueue("wait-paused");
    expect(job.waiting).toMatchObject({ code: "workspace_paused" });
    expect(job.waiting!.message).toMatch(
      /^workspace "wait-paused" is paused since .* by spiffe:\/\/test\/admins\/ops \(maintenance\).*POST \/v1\/admin\/workspaces\/wait-paused\/resume/,
    );
  });

  it("runners_paused: every runner with the labels is paused", async () => {
    await registeredRunner(cp, "wrp-1", "wait-rpaused");
    await registeredRunner(cp, "wrp-2", "wait-rpaused", { labels: ["windows"] });
    await cp.plane.store.db
      .updateTable("runners")
      .set({ paused_at: new Date(), paused_by: "ops" })
      .where("runner_id", "=", "wrp-1")
      .execute();
    const job = await enqueue("wait-rpaused");
    expect(job.waiting).toMatchObject({
      code: "runners_paused",
      message: expect.stringContaining("(wrp-1)"),
    });
  });

  it("runners_not_connected: matching runners exist but each is offline (the runner state)", async () => {
    await registeredRunner(cp, "wnc-1", "wait-gone");
    await cp.plane.store.db
      .updateTable("runners")
      .set({ last_seen_at: new Date(Date.now() - 3600_000) })
      .where("runner_id", "=", "wnc-1")
      .execute();
    const job = await enqueue("wait-gone");
    expect(job.waiting).toMatchObject({
      code: "runners_not_connected",
      message: expect.stringContaining("each is offline (not heard from in the last 90 s)"),
    });
  });

  it("a runner silent past the lease length but not offline is still connected; a draining one is not", async () => {
    await registeredRunner(cp, "wq-1", "wait-quiet");
    // 40 s: past the 30 s lease, within the 90 s before a runner is offline (forelead_runner_state).
    await cp.plane.store.db
      .updateTable("runners")
      .set({ last_seen_at: new Date(Date.now() - 40_000) })
      .where("runner_id", "=", "wq-1")
      .execute();
    expect((await enqueue("wait-quiet")).waiting).toBeUndefined();
    // Registered, then registered again saying it drains (as a runner stopping with a job running).
    const draining = await registeredRunner(cp, "wd-1", "wait-draining");
    expect((await draining.register({ draining: true })).status).toBe(200);
    expect((await enqueue("wait-draining")).waiting).toMatchObject({
      code: "runners_not_connected",
      message: expect.stringContaining("or draining"),
    });
  });

  it("all_busy: every matching runner's slots hold live leases, counted; a free slot clears the reason", async () => {
    const runner = await registeredRunner(cp, "wb-1", "wait-busy", { slots: 2 });
    await enqueue("wait-busy");
    const second = await enqueue("wait-busy");
    expect(second.waiting).toBeUndefined(); // one slot still free
    const leases = [await runner.claim(), await runner.claim()];
    for (const l of leases) expect(l.status, l.text).toBe(200);
    const third = await enqueue("wait-busy");
    expect(third.waiting).toEqual({
      code: "all_busy",
      busyRunners: 1,
      busySlots: 2,
      message:
        'all 1 matching runner in workspace "wait-busy" are busy (2 slots in ' +
        "use); the job runs when one frees a slot, or add a runner or slots",
    });
    expect(await waitingOf(third.id)).toEqual(third.waiting);
    const running = await admin.job(leases[0]!.json.job.id);
    expect(running.json.job.state).toBe("running");
    expect(running.json.job.waiting).toBeUndefined();
    const released = await runner.release(leases[0]!.json.job.id, leases[0]!.json.token);
    expect(released.status, released.text).toBe(204);
    expect(await waitingOf(third.id)).toBeUndefined();
  });

  it("a retired runner does not count as registered", async () => {
    await registeredRunner(cp, "wr-1", "wait-retired");
    await cp.plane.store.db
      .updateTable("runners")
      .set({ retired_at: new Date() })
      .where("runner_id", "=", "wr-1")
      .execute();
    expect((await enqueue("wait-retired")).waiting).toMatchObject({ code: "no_runner" });
  });
});
