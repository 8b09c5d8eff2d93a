// Pause and resume (docs/fleet.md "Pausing"): a paused workspace's jobs are not
// claimed and a paused runner gets no new lease, while live leases renew and settle;
// resume wakes waiting claims at once; both are audited, idempotent and shared
// through the database, so they hold across replicas and restarts.
import { describe, expect, it } from "vitest";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { sql } from "kysely";
import { adminActor, eventually, registeredRunner, runnerActor } from "../support/actors.js";
import { createRestClient } from "../support/clients.js";
import { startTestControlPlane, type TestControlPlane } from "../support/control-plane.js";
import { createTestDatabase, databaseKind, type TestDatabase } from "../support/database.js";
import { useControlPlane, useReplicaPair } from "../support/fixture.js";

const cp = useControlPlane();
const { admin } = cp;
let n = 0;
const freshWorkspace = () => `pw${++n}`;

/**
 * Waits until a claim just sent for the runner of workspace `w` has been
 * tried once (a claim marks the runner seen, and found nothing): it is then
 * parked, waiting for a wake.
 */
async function claimTried(plane: Pick<TestControlPlane, "plane">, w: string): Promise<void> {
  const db = plane.plane.store.db;
  await eventually("the claim to have been tried", async () => {
    const { rows } = await sql<{
      recent: boolean;
    }>`select last_seen_at > registered_at as recent from runners where workspace_id = ${w}`.execute(
      db,
    );
    return rows[0]?.recent ? true : undefined;
  });
}

const post = (path: string, body: Record<string, unknown> = {}) =>
  admin.rest.request("POST", path, { apiVersion: "v1", ...body });

describe(`pausing a workspace (${databaseKind})`, () => {
  it("claims there get nothing while running jobs complete; resume lets the claim take the job", async () => {
    const w = freshWorkspace();
    const runner = await registeredRunner(cp, "r1", w, { slots: 2 });
    const running = (await admin.enqueue({ workspaceId: w })).json.job.id as string;
    const lease = await runner.claim();
    expect(lease.json.job.id).toBe(running);

    const paused = await post(`/v1/admin/workspaces/${w}/pause`, { reason: "maintenance" });
    expect(paused.status, paused.text).toBe(200);
    expect(paused.json).toMatchObject({
      workspaceId: w,
      reason: "maintenance",
      pausedBy: "spiffe://forelead/services/test-admin",
    });
    expect(paused.json.alreadyPaused).toBeUndefined();
    const again = await post(`/v1/admin/workspaces/${w}/pause`);
    expect([again.status, again.json.alreadyPaused, again.json.reason]).toEqual([
      200,
      true,
      "maintenance",
    ]);

    const queued = (await admin.enqueue({ workspaceId: w })).json.job.id as string;
    expect((await runner.claim()).status).toBe(204);
    // The live lease goes on: it renews and settles.
    expect((await runner.renew(running, lease.json.token)).status).toBe(200);
    expect((await runner.complete(running, lease.json.token)).json.job.state).toBe("succeeded");
    expect((await runner.claim()).status).toBe(204);

    expect((await post(`/v1/admin/workspaces/${w}/resume`)).json).toMatchObject({
      workspaceId: w,
      wasPaused: true,
    });
    expect((await post(`/v1/admin/workspaces/${w}/resume`)).json.wasPaused).toBeUndefined();
    const claimed = await runner.claim();
    expect([claimed.status, claimed.json.job?.id]).toEqual([200, queued]);
    await runner.close();
  });

  it(
    "a workspace with no runner or job yet may be paused ahead; the audit " +
      "trail records each pause and resume",
    async () => {
      const w = freshWorkspace();
      expect((await post(`/v1/admin/workspaces/${w}/pause`)).status).toBe(200);
      expect((await post(`/v1/admin/workspaces/${w}/resume`)).status).toBe(200);
      const audit = await admin.rest.request("GET", "/v1/admin/audit?pageSize=50");
      const mine = (
        audit.json.records as Array<{ action: string; target: string; reason: string }>
      ).filter((r) => r.target === `workspace "${w}"`);
      expect(mine.map((r) => [r.action, r.reason])).toEqual([
        ["workspace.resume", "resumed"],
        ["workspace.pause", "paused"],
      ]);
    },
  );

  it("resume wakes a claim already waiting in the workspace", async () => {
    const w = freshWorkspace();
    const runner = await registeredRunner(cp, "r1", w);
    await post(`/v1/admin/workspaces/${w}/pause`);
    const job = (await admin.enqueue({ workspaceId: w })).json.job.id as string;
    const started = Date.now();
    const waiting = runner.claim({ waitSeconds: 20 });
    await claimTried(cp, w);
    expect((await post(`/v1/admin/workspaces/${w}/resume`)).status).toBe(200);
    const claimed = await waiting;
    expect([claimed.status, claimed.json.job?.id]).toEqual([200, job]);
    // Without the wake the claim would look again only when its 20 s wait ran out.
    expect(Date.now() - started).toBeLessThan(10_000);
    await runner.close();
  });
});

describe(`pausing a runner (${databaseKind})`, () => {
  it(
    "its claims answer 204 while its lease renews and completes; other " +
      "runners still claim; resume gives it work",
    async () => {
      const w = freshWorkspace();
      const r1 = await registeredRunner(cp, "r1", w, { slots: 2 });
      const r2 = await registeredRunner(cp, "r2", w);
      const first = (await admin.enqueue({ workspaceId: w })).json.job.id as string;
      const lease = await r1.claim();
      expect(lease.json.job.id).toBe(first);

      const paused = await post(`/v1/admin/runners/r1/pause`, { workspaceId: w, reason: "drain" });
      expect(paused.status, paused.text).toBe(200);
      expect(paused.json).toMatchObject({ runnerId: "r1", workspaceId: w });
      expect(
        (await post(`/v1/admin/runners/r1/pause`, { workspaceId: w })).json.alreadyPaused,
      ).toBe(true);
      const listed = async () =>
        (
          (await admin.rest.request("GET", `/v1/admin/runners?workspaceId=${w}`)).json.runners as {
            runnerId: string;
            pausedAt?: string;
            pausedBy?: string;
          }[]
        ).sort((a, b) => a.runnerId.localeCompare(b.runnerId));
      const [r1View, r2View] = await listed();
      expect(new Date(r1View!.pausedAt!).getTime()).toBeGreaterThan(Date.now() - 60_000);
      expect(r1View!.pausedBy).toMatch(/^spiffe:\/\//);
      expect(r2View!.pausedAt).toBeUndefined();

      const second = (await admin.enqueue({ workspaceId: w })).json.job.id as string;
      expect((await r1.claim()).status).toBe(204);
      expect((await r1.renew(first, lease.json.token)).status).toBe(200);
      expect((await r1.complete(first, lease.json.token)).json.job.state).toBe("succeeded");
      expect((await r2.claim()).json.job.id).toBe(second);

      const third = (await admin.enqueue({ workspaceId: w })).json.job.id as string;
      expect((await r1.claim()).status).toBe(204);
      expect((await post(`/v1/admin/runners/r1/resume`, { workspaceId: w })).json.wasPaused).toBe(
        true,
      );
      expect((await listed())[0]!.pausedAt).toBeUndefined();
      expect((await r1.claim()).json.job.id).toBe(third);
      await r1.close();
      await r2.close();
    },
  );

  it("an unknown runner is refused by name (404); an ambiguous id needs its workspace (400)", async () => {
    const unknown = await post(`/v1/admin/runners/nobody/pause`);
    expect([unknown.status, unknown.json.message]).toEqual([
      404,
      'runner "nobody" is not registered; check the id with GET /v1/admin/runners',
    ]);
    const a = await registeredRunner(cp, "twin", freshWorkspace());
    const b = await registeredRunner(cp, "twin", freshWorkspace());
    const ambiguous = await post(`/v1/admin/runners/twin/pause`);
    expect(ambiguous.status).toBe(400);
    expect(ambiguous.json.message).toMatch(
      /^runner id "twin" is registered in workspaces "pw\d+", "pw\d+"; give workspaceId to say which one$/,
    );
    await a.close();
    await b.close();
  });

  it("an identity without the admin role cannot pause (403)", async () => {
    const rest = createRestClient(
      cp.url,
      cp.pki.ca.certPem,
      await cp.pki.service("nobody-granted"),
    );
    const refused = await rest.request("POST", `/v1/admin/workspaces/${freshWorkspace()}/pause`, {
      apiVersion: "v1",
    });
    expect(refused.status).toBe(403);
    await rest.close();
  });
});

describe(`pauses survive a restart (${databaseKind})`, () => {
  it("a workspace and a runner paused before a restart are still paused after it", async () => {
    // A database that outlives the control plane: a data directory, or a fresh Postgres database.
    const dir = await mkdtemp(path.join(os.tmpdir(), "forelead-pause-"));
    const database: TestDatabase =
      databaseKind === "embedded"
        ? {
            location: path.join(dir, "data"),
            kind: "embedded",
            drop: () => rm(dir, { recursive: true, force: true }),
          }
        : await createTestDatabase();
    let plane = await startTestControlPlane({ database, pki: cp.pki });
    try {
      let boss = await adminActor(plane);
      await registeredRunner(plane, "r1", "wa").then((r) => r.close());
      await registeredRunner(plane, "r2", "wb").then((r) => r.close());
      expect(
        (await boss.rest.request("POST", "/v1/admin/workspaces/wa/pause", { apiVersion: "v1" }))
          .status,
      ).toBe(200);
      expect(
        (await boss.rest.request("POST", "/v1/admin/runners/r2/pause", { apiVersion: "v1" }))
          .status,
      ).toBe(200);
      for (const w of ["wa", "wb"])
        expect((await boss.enqueue({ workspaceId: w })).status).toBe(200);
      await boss.close();
      await plane.plane.close();

      plane = await startTestControlPlane({ database, pki: cp.pki });
      boss = await adminActor(plane);
      const r1 = await registeredRunner(plane, "r1", "wa");
      const r2 = await registeredRunner(plane, "r2", "wb");
      expect((await r1.claim()).status).toBe(204);
      expect((await r2.claim()).status).toBe(204);
      expect(
        (await boss.rest.request("POST", "/v1/admin/workspaces/wa/resume", { apiVersion: "v1" }))
          .json.wasPaused,
      ).toBe(true);
      expect(
        (await boss.rest.request("POST", "/v1/admin/runners/r2/resume", { apiVersion: "v1" })).json
          .wasPaused,
      ).toBe(true);
      expect((await r1.claim()).status).toBe(200);
      expect((await r2.claim()).status).toBe(200);
      await Promise.all([r1.close(), r2.close(), boss.close()]);
    } finally {
      await plane.plane.close();
      await database.drop();
      await rm(dir, { recursive: true, force: true });
    }
  }, 120_000);
});

describe.runIf(databaseKind === "postgres")("pause and resume across two replicas", () => {
  const pair = useReplicaPair();

  it("a pause through A refuses a claim through B at once; a resume through B wakes a claim waiting on A", async () => {
    const w = "rep1";
    const adminA = await adminActor(pair.a);
    const adminB = await adminActor(pair.b, pair.b.url);
    const runnerA = await registeredRunner(pair.a, "r1", w);
    const runnerB = await runnerActor(pair.a, "r1", w, pair.b.url);
    expect(
      (await adminA.rest.request("POST", `/v1/admin/workspaces/${w}/pause`, { apiVersion: "v1" }))
        .status,
    ).toBe(200);
    const job = (await adminA.enqueue({ workspaceId: w })).json.job.id as string;
    expect((await runnerB.claim()).status).toBe(204);

    const started = Date.now();
    const waiting = runnerA.claim({ waitSeconds: 20 });
    await claimTried(pair.a, w);
    expect(
      (await adminB.rest.request("POST", `/v1/admin/workspaces/${w}/resume`, { apiVersion: "v1" }))
        .status,
    ).toBe(200);
    const claimed = await waiting;
    expect([claimed.status, claimed.json.job?.id]).toEqual([200, job]);
    // Without the wake the claim would look again only when its 20 s wait ran out.
    expect(Date.now() - started).toBeLessThan(10_000);
    await Promise.all([adminA.close(), adminB.close(), runnerA.close(), runnerB.close()]);
  });
});
