import { describe, expect, it } from "vitest";
import { adminActor, eventually, runnerActor } from "../support/actors.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane, useReplicaPair } from "../support/fixture.js";

const cp = useControlPlane();
const { admin } = cp;
let wsCounter = 0;
const freshWorkspace = () => `rt${++wsCounter}`;

describe(`retiring a runner (${databaseKind})`, () => {
  it(
    "takes effect on the very next request of an already-open HTTP/2 " +
      "connection, and its live lease goes back to the queue",
    async () => {
      const ws = freshWorkspace();
      const runner = await runnerActor(cp, "r1", ws);
      expect((await runner.register({ slots: 2 })).status).toBe(200);
      const enq = await admin.enqueue({ workspaceId: ws, maxAttempts: 1 });
      const jobId = enq.json.job.id;
      const claim = await runner.claim();
      expect(claim.status, claim.text).toBe(200);
      const token = claim.json.token;
      expect((await runner.renew(jobId, token)).status).toBe(200);
      const session = runner.rest.session;

      const retire = await admin.rest.request("POST", `/v1/admin/runners/r1/retire`, {
        apiVersion: "v1",
        workspaceId: ws,
        reason: "key leaked",
      });
      expect(retire.status, retire.text).toBe(200);
      expect(retire.json).toMatchObject({
        apiVersion: "v1",
        runnerId: "r1",
        workspaceId: ws,
        releasedJobIds: [jobId],
        newlyRetired: true,
      });
      expect(retire.json.retiredAt).toBeDefined();

      // Same connection (same TLS session), next request: refused.
      const renew = await runner.renew(jobId, token);
      expect(runner.rest.session).toBe(session);
      expect(session.closed || session.destroyed).toBe(false);
      expect(renew.status).toBe(403);
      expect(renew.json.message).toMatch(
        new RegExp(
          `^runner "r1" in workspace "${ws}" was retired at \\d{4}-.*; enroll a new runner identity$`,
        ),
      );
      for (const reply of [
        await runner.claim(),
        await runner.complete(jobId, token),
        await runner.rest.request("GET", "/v1/runner/clock"),
        await runner.register(),
      ]) {
        expect(reply.status).toBe(403);
      }

      // The job is queued again without charging the attempt, and another runner takes it.
      const job = await admin.job(jobId);
      expect(job.json.job).toMatchObject({ state: "queued", attempts: 0 });
      const other = await runnerActor(cp, "r2", ws);
      await other.register();
      const taken = await other.claim();
      expect(taken.status, taken.text).toBe(200);
      expect(taken.json.job.id).toBe(jobId);

      // A new connection with the same identity is refused too.
      const again = await runnerActor(cp, "r1", ws);
      expect((await again.rest.request("GET", "/v1/runner/clock")).status).toBe(403);
      await Promise.all([runner.close(), other.close(), again.close()]);
    },
  );

  it(
    "the runner stays listed, marked retired; retiring again changes " +
      "nothing; an unknown runner id needs its workspace",
    async () => {
      const ws = freshWorkspace();
      const runner = await runnerActor(cp, "keep", ws);
      await runner.register();
      await runner.close();
      const first = await admin.rest.request("POST", "/v1/admin/runners/keep/retire", {
        apiVersion: "v1",
      });
      expect(first.status, first.text).toBe(200);
      expect(first.json).toMatchObject({ workspaceId: ws, newlyRetired: true });
      const second = await admin.rest.request("POST", "/v1/admin/runners/keep/retire", {
        apiVersion: "v1",
        workspaceId: ws,
      });
      expect(second.status, second.text).toBe(200);
      expect(second.json.retiredAt).toBe(first.json.retiredAt);
      expect(second.json.newlyRetired).toBeUndefined(); // proto3 JSON leaves out false

      const list = await admin.rest.request("GET", `/v1/admin/runners?workspaceId=${ws}`);
      expect(list.json.runners).toEqual([
        expect.objectContaining({ runnerId: "keep", retiredAt: first.json.retiredAt }),
      ]);

      const unknown = await admin.rest.request("POST", "/v1/admin/runners/nobody/retire", {
        apiVersion: "v1",
      });
      expect(unknown.status).toBe(404);
      expect(unknown.json.message).toContain("give workspaceId to retire it anyway");
      const ahead = await admin.rest.request("POST", "/v1/admin/runners/nobody/retire", {
        apiVersion: "v1",
        workspaceId: ws,
      });
      expect(ahead.status, ahead.text).toBe(200);
    },
  );

  it("a runner id known in two workspaces is not retired without saying which", async () => {
    const [a, b] = [freshWorkspace(), freshWorkspace()];
    for (const ws of [a, b]) {
      const r = await runnerActor(cp, "twin", ws);
      await r.register();
      await r.close();
    }
    const reply = await admin.rest.request("POST", "/v1/admin/runners/twin/retire", {
      apiVersion: "v1",
    });
    expect(reply.status).toBe(400);
    expect(reply.json.message).toBe(
      `runner id "twin" is known in workspaces "${a}", "${b}"; give workspaceId to say which one to retire`,
    );
  });

  it("retiring a runner with a cancelled running job settles that job as cancelled", async () => {
    const ws = freshWorkspace();
    const runner = await runnerActor(cp, "rc", ws);
    await runner.register();
    const jobId = (await admin.enqueue({ workspaceId: ws })).json.job.id;
    expect((await runner.claim()).status).toBe(200);
    await admin.cancel(jobId);
    const retire = await admin.rest.request("POST", "/v1/admin/runners/rc/retire", {
      apiVersion: "v1",
      workspaceId: ws,
    });
    expect(retire.json.releasedJobIds).toEqual([jobId]);
    expect((await admin.job(jobId)).json.job).toMatchObject({
      state: "cancelled",
      failure: { reason: "cancelled", message: "cancelled; the runner was retired" },
    });
    await runner.close();
  });
});

describe.runIf(databaseKind === "postgres")("retirement across replicas (postgres)", () => {
  const replicas = useReplicaPair();

  it("a retire on one replica reaches an open connection on the other through NOTIFY", async () => {
    const runner = await runnerActor(replicas.b, "rx", "w1");
    expect((await runner.register()).status).toBe(200);
    const adminA = await adminActor(replicas.a);
    const retire = await adminA.rest.request("POST", "/v1/admin/runners/rx/retire", {
      apiVersion: "v1",
      workspaceId: "w1",
    });
    expect(retire.status, retire.text).toBe(200);
    const refused = await eventually("replica b to refuse the retired runner", async () => {
      const reply = await runner.rest.request("GET", "/v1/runner/clock");
      return reply.status === 403 ? reply : undefined;
    });
    expect(refused.json.message).toContain('runner "rx" in workspace "w1" was retired');
    await Promise.all([runner.close(), adminA.close()]);
  });
});
