import http2 from "node:http2";
import { sql } from "kysely";
import { describe, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { AdminService } from "../../gen/forelead/admin/v1/admin_pb.js";
import { RunnerService } from "../../gen/forelead/runner/v1/runner_pb.js";
import { eventually, registeredRunner, runnerActor } from "../support/actors.js";
import { createTestClient } from "../support/clients.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";

const cp = useControlPlane();
const { admin } = cp;
let wsCounter = 0;
/** Each test works in a workspace of its own, so tests never see each other's jobs. */
const freshWorkspace = () => `ws${++wsCounter}`;

async function queuedJobs(workspaceId: string): Promise<number> {
  const reply = await admin.rest.request(
    "GET",
    `/v1/admin/jobs?workspaceId=${workspaceId}&state=queued&pageSize=500`,
  );
  return (reply.json.jobs ?? []).length;
}

describe(`the job lifecycle (${databaseKind})`, () => {
  it("enqueue → claim → renew → complete over REST, with the wire names of docs/routes.md", async () => {
    const ws = freshWorkspace();
    const runner = await registeredRunner(cp, "r1", ws, { labels: ["linux", "docker"] });
    const enq = await admin.enqueue({
      workspaceId: ws,
      maxAttempts: 3,
      idempotencyKey: "build-4711",
      spec: {
        image: "busybox",
        argv: ["sh", "-c", "echo hi"],
        env: { CI: "1" },
        timeoutSeconds: 60,
        memoryBytes: "2147483648",
      },
    });
    expect(enq.status, enq.text).toBe(200);
    expect(enq.json.job).toMatchObject({
      workspaceId: ws,
      state: "queued",
      attempts: 0,
      maxAttempts: 3,
      labels: ["linux"],
    });
    const jobId = enq.json.job.id;

    const claim = await runner.claim();
    expect(claim.status, claim.text).toBe(200);
    expect(claim.json).toMatchObject({
      apiVersion: "v1",
      cancelRequested: false,
      job: {
        id: jobId,
        workspaceId: ws,
        labels: ["linux"],
        kind: "command",
        spec: {
          image: "busybox",
          argv: ["sh", "-c", "echo hi"],
          env: { CI: "1" },
          timeoutSeconds: 60,
          memoryBytes: "2147483648",
        },
      },
    });
    expect(claim.json.token).toMatch(/^[A-Za-z0-9_-]{43}$/);
    const expiresAt = Date.parse(claim.json.expiresAt);
    expect(expiresAt - Date.now()).toBeGreaterThan(20_000);
    expect(expiresAt - Date.now()).toBeLessThanOrEqual(31_000);

    const running = await admin.job(jobId);
    expect(running.json.job).toMatchObject({ state: "running", runnerId: "r1", attempts: 1 });
    expect(running.json.job.leaseExpiresAt).toBeDefined();
    expect(running.text).not.toContain(claim.json.token);

    const renew = await runner.renew(jobId, claim.json.token);
    expect(renew.status, renew.text).toBe(200);
    expect(renew.json).toMatchObject({
      apiVersion: "v1",
      cancelRequested: false,
      job: { id: jobId },
    });
    expect(renew.json.token ?? "").toBe(""); // the token is shown only by the claim that issued it
    expect(Date.parse(renew.json.expiresAt)).toBeGreaterThanOrEqual(expiresAt);

    const done = await runner.complete(jobId, claim.json.token, {
      completionId: "c-7",
      outcome: "succeeded",
      exitCode: 0,
    });
    expect(done.status, done.text).toBe(200);
    expect(done.json).toMatchObject({
      apiVersion: "v1",
      job: { id: jobId, state: "succeeded", exitCode: 0, attempts: 1 },
    });
    expect((await admin.job(jobId)).json.job.state).toBe("succeeded");
    await runner.close();
  });

  it("the same lifecycle through generated Connect clients", async () => {
    const ws = freshWorkspace();
    const runnerCert = await cp.pki.runner("g1", ws);
    const runner = createTestClient(
      RunnerService,
      cp.url,
      cp.pki.ca.certPem,
      runnerCert,
      "connect-binary",
    );
    const adminClient = createTestClient(
      AdminService,
      cp.url,
      cp.pki.ca.certPem,
      await cp.pki.service("test-admin"),
      "grpc",
    );
    await runner.register({
      apiVersion: "v1",
      runnerId: "g1",
      workspaceId: ws,
      slots: 1,
      labels: ["linux"],
    });
    const { job } = await adminClient.enqueueJob({
      apiVersion: "v1",
      workspaceId: ws,
      labels: ["linux"],
      spec: { image: "busybox", argv: ["true"] },
    });
    expect(job?.state).toBe("queued");
    const { lease } = await runner.claim({ apiVersion: "v1", runnerId: "g1" });
    expect(lease?.job?.id).toBe(job!.id);
    const renewed = await runner.renew({
      apiVersion: "v1",
      jobId: job!.id,
      leaseToken: lease!.token,
    });
    expect(renewed.lease?.cancelRequested).toBe(false);
    const done = await runner.complete({
      apiVersion: "v1",
      jobId: job!.id,
      leaseToken: lease!.token,
      completionId: "c1",
      outcome: "succeeded",
      exitCode: 0,
    });
    expect(done.job?.state).toBe("succeeded");
    const none = await runner.claim({ apiVersion: "v1", runnerId: "g1" });
    expect(none.lease).toBeUndefined();
    const got = await adminClient.getJob({ jobId: job!.id });
    expect(got.job?.state).toBe("succeeded");
  });

  it("a claim with nothing eligible answers 204", async () => {
    const runner = await registeredRunner(cp, "idle", freshWorkspace());
    const reply = await runner.claim();
    expect(reply.status).toBe(204);
    expect(reply.text).toBe("");
    await runner.close();
  });

  it("a job is leased only to a runner of its workspace whose labels include the job's", async () => {
    const ws = freshWorkspace();
    const other = freshWorkspace();
    const gpu = (await admin.enqueue({ workspaceId: ws, labels: ["linux", "gpu"] })).json.job.id;
    const plain = (await admin.enqueue({ workspaceId: ws, labels: ["linux"] })).json.job.id;
    const stranger = await registeredRunner(cp, "r1", other, {
      labels: ["linux", "gpu"],
      slots: 4,
    });
    expect((await stranger.claim()).status).toBe(204);
    const linuxOnly = await registeredRunner(cp, "r2", ws, { labels: ["linux"], slots: 4 });
    const first = await linuxOnly.claim();
    expect(first.json.job.id).toBe(plain);
    expect((await linuxOnly.claim()).status).toBe(204); // the gpu job stays queued
    const gpuRunner = await registeredRunner(cp, "r3", ws, {
      labels: ["gpu", "linux", "big"],
      slots: 4,
    });
    expect((await gpuRunner.claim()).json.job.id).toBe(gpu);
    await Promise.all([stranger.close(), linuxOnly.close(), gpuRunner.close()]);
  });

  it("a runner never holds more live leases than its slots", async () => {
    const ws = freshWorkspace();
    for (let i = 0; i < 5; i++) await admin.enqueue({ workspaceId: ws });
    const runner = await registeredRunner(cp, "r1", ws, { slots: 2 });
    const claims = await Promise.all([
      runner.claim(),
      runner.claim(),
      runner.claim(),
      runner.claim(),
    ]);
    expect(claims.map((c) => c.status).sort()).toEqual([200, 200, 204, 204]);
    const held = claims.filter((c) => c.status === 200);
    await runner.complete(held[0]!.json.job.id, held[0]!.json.token);
    expect((await runner.claim()).status).toBe(200); // a freed slot can be used again
    expect((await runner.claim()).status).toBe(204);
    await runner.close();
  });

  it("the highest priority runs first, then the oldest", async () => {
    const ws = freshWorkspace();
    const low = (await admin.enqueue({ workspaceId: ws, priority: 0 })).json.job.id;
    const high = (await admin.enqueue({ workspaceId: ws, priority: 5 })).json.job.id;
    const low2 = (await admin.enqueue({ workspaceId: ws, priority: 0 })).json.job.id;
    const runner = await registeredRunner(cp, "r1", ws, { slots: 3 });
    const order = [];
    for (let i = 0; i < 3; i++) order.push((await runner.claim()).json.job.id);
    expect(order).toEqual([high, low, low2]);
    await runner.close();
  });

  it("long-poll: a waiting claim is answered by the enqueue's wakeup, before its wait runs out", async () => {
    const ws = freshWorkspace();
    const runner = await registeredRunner(cp, "r1", ws);
    const lastSeen = async () =>
      (
        await sql<{
          seen: string;
        }>`select last_seen_at::text as seen from runners where workspace_id = ${ws} and runner_id = 'r1'`.execute(
          cp.plane.store.db,
        )
      ).rows[0]!.seen;
    const registered = await lastSeen();
    const waitSeconds = 20;
    let waitRanOut: ReturnType<typeof setTimeout> | undefined;
    // Started before the claim is sent, so it fires before the server's own deadline would.
    const runsOut = new Promise<"wait ran out">(
      (resolve) => (waitRanOut = setTimeout(resolve, waitSeconds * 1000, "wait ran out")),
    );
    const waiting = runner.claim({ waitSeconds });
    // A claim stamps last_seen_at when it tries; its waiter is armed before that try, which found
    // nothing: from here on only the enqueue's notification (or the wait running out) answers it.
    await eventually("the claim's first try", async () =>
      (await lastSeen()) !== registered ? true : undefined,
    );
    const enqueued = await admin.enqueue({ workspaceId: ws });
    const first = await Promise.race([waiting.then(() => "claim answered" as const), runsOut]);
    clearTimeout(waitRanOut);
    expect(first).toBe("claim answered");
    const claim = await waiting;
    expect(claim.status).toBe(200);
    expect(claim.json.job.id).toBe(enqueued.json.job.id);
    await runner.close();
  });

  it("long-poll: with nothing enqueued the claim returns 204 after waitSeconds", async () => {
    const runner = await registeredRunner(cp, "r1", freshWorkspace());
    const started = Date.now();
    const claim = await runner.claim({ waitSeconds: 1 });
    expect(claim.status).toBe(204);
    expect(Date.now() - started).toBeGreaterThanOrEqual(950);
    await runner.close();
  });

  it(
    "long-poll: a claim whose client resets its stream, or whose connection " +
      "drops, stops waiting; the next job goes to a runner still waiting, " +
      "never to a request that is gone",
    async () => {
      const ws = freshWorkspace();
      const gone = await registeredRunner(cp, "r1", ws);
      const stays = await registeredRunner(cp, "r2", ws);
      const lastSeen = async (runnerId: string) =>
        (
          await sql<{
            seen: string;
          }>`select last_seen_at::text as seen from runners where workspace_id = ${ws} and runner_id
          = ${runnerId}`.execute(cp.plane.store.db)
        ).rows[0]!.seen;
      const registered = await lastSeen("r1");
      // r1 waits first, so a wake would go to it before r2; then its client closes the stream.
      const stream = gone.rest.session.request({
        ":method": "POST",
        ":path": "/v1/runner/claim",
        "content-type": "application/json",
      });
      stream.on("error", () => {});
      stream.end(JSON.stringify({ apiVersion: "v1", runnerId: "r1", waitSeconds: 20 }));
      await eventually("r1's claim to be waiting", async () =>
        (await lastSeen("r1")) !== registered ? true : undefined,
      );
      // r3 waits next, then its whole connection goes (a runner whose machine lost its network).
      const dropped = await registeredRunner(cp, "r3", ws);
      const r3Before = await lastSeen("r3");
      const droppedClaim = dropped.claim({ waitSeconds: 20 }).catch(() => undefined);
      await eventually("r3's claim to be waiting", async () =>
        (await lastSeen("r3")) !== r3Before ? true : undefined,
      );
      stream.close(http2.constants.NGHTTP2_CANCEL);
      dropped.rest.session.destroy();
      await droppedClaim;
      await eventually("r1's stream to close", async () => (stream.closed ? true : undefined));
      const seenBefore = await lastSeen("r2");
      const waiting = stays.claim({ waitSeconds: 20 });
      await eventually("r2's claim to be waiting", async () =>
        (await lastSeen("r2")) !== seenBefore ? true : undefined,
      );
      const enqueued = await admin.enqueue({ workspaceId: ws });
      const claim = await waiting;
      expect(claim.status, claim.text).toBe(200);
      expect(claim.json.job.id).toBe(enqueued.json.job.id);
      expect((await admin.job(enqueued.json.job.id)).json.job).toMatchObject({
        state: "running",
        runnerId: "r2",
        attempts: 1,
      });
      await Promise.all([gone.close(), stays.close(), dropped.close()]);
    },
  );

  it("release returns the job to the queue at once without charging the attempt; the old token is dead", async () => {
    const ws = freshWorkspace();
    const jobId = (await admin.enqueue({ workspaceId: ws })).json.job.id;
    const runner = await registeredRunner(cp, "r1", ws);
    const claim = await runner.claim();
    const released = await runner.release(jobId, claim.json.token);
    expect(released.status, released.text).toBe(204);
    expect((await admin.job(jobId)).json.job).toMatchObject({ state: "queued", attempts: 0 });
    for (const call of [
      runner.renew(jobId, claim.json.token),
      runner.release(jobId, claim.json.token),
      runner.complete(jobId, claim.json.token),
    ]) {
      const reply = await call;
      expect(reply.status).toBe(409);
      expect(reply.json).toMatchObject({ code: "aborted" });
      expect(reply.json.message).toContain("released");
    }
    const again = await runner.claim();
    expect(again.json.job.id).toBe(jobId);
    expect(again.json.token).not.toBe(claim.json.token);
    await runner.close();
  });

  it("complete is idempotent by completionId; a different completion after settling gets 409", async () => {
    const ws = freshWorkspace();
    const jobId = (await admin.enqueue({ workspaceId: ws })).json.job.id;
    const runner = await registeredRunner(cp, "r1", ws);
    const { token } = (await runner.claim()).json;
    const body = {
      completionId: "c-7",
      outcome: "failed",
      exitCode: 2,
      error: { code: "exit_code", message: "make exited 2", retryable: false },
    };
    const first = await runner.complete(jobId, token, body);
    expect(first.status, first.text).toBe(200);
    expect(first.json.job).toMatchObject({
      state: "failed",
      exitCode: 2,
      error: { code: "exit_code", message: "make exited 2" },
    });
    const again = await runner.complete(jobId, token, body);
    expect(again.status).toBe(200);
    expect(again.json).toEqual(first.json);
    const different = await runner.complete(jobId, token, {
      ...body,
      completionId: "c-8",
      outcome: "succeeded",
    });
    expect(different.status).toBe(409);
    expect(different.json.message).toContain("c-7");
    const sameIdOtherBody = await runner.complete(jobId, token, { ...body, exitCode: 3 });
    expect(sameIdOtherBody.status).toBe(409);
    expect((await admin.job(jobId)).json.job).toMatchObject({ state: "failed", exitCode: 2 });
    await runner.close();
  });

  it("a retryable failure requeues the job while attempts remain", async () => {
    const ws = freshWorkspace();
    const jobId = (await admin.enqueue({ workspaceId: ws, maxAttempts: 2 })).json.job.id;
    const runner = await registeredRunner(cp, "r1", ws);
    const retryable = {
      outcome: "failed",
      exitCode: 1,
      error: { code: "infra", message: "disk full", retryable: true },
    };
    const first = (await runner.claim()).json;
    expect(
      (await runner.complete(jobId, first.token, { ...retryable, completionId: "a1" })).json.job,
    ).toMatchObject({ state: "queued", attempts: 1 });
    const second = (await runner.claim()).json;
    expect(second.job.id).toBe(jobId);
    expect(
      (await runner.complete(jobId, second.token, { ...retryable, completionId: "a2" })).json.job,
    ).toMatchObject({ state: "failed", attempts: 2 });
    await runner.close();
  });

  it("cancel of a queued job settles it at once; cancel of a running job reaches the runner on renew", async () => {
    const ws = freshWorkspace();
    const queued = (await admin.enqueue({ workspaceId: ws })).json.job.id;
    const cancelled = await admin.cancel(queued);
    expect(cancelled.status).toBe(200);
    expect(cancelled.json.job).toMatchObject({
      state: "cancelled",
      failure: { reason: "cancelled" },
    });
    const runner = await registeredRunner(cp, "r1", ws);
    expect((await runner.claim()).status).toBe(204);

    const running = (await admin.enqueue({ workspaceId: ws })).json.job.id;
    const lease = (await runner.claim()).json;
    expect(lease.job.id).toBe(running);
    expect((await admin.cancel(running)).json.job).toMatchObject({
      state: "running",
      cancelRequested: true,
    });
    const renew = await runner.renew(running, lease.token);
    expect(renew.json.cancelRequested).toBe(true);
    const done = await runner.complete(running, lease.token, {
      outcome: "cancelled",
      completionId: "x",
    });
    expect(done.json.job.state).toBe("cancelled");
    // cancelling a cancelled job is harmless
    expect((await admin.cancel(running)).status).toBe(200);

    const finished = (await admin.enqueue({ workspaceId: ws })).json.job.id;
    const l2 = (await runner.claim()).json;
    await runner.complete(finished, l2.token);
    const late = await admin.cancel(finished);
    expect(late.status).toBe(409);
    expect(late.json.message).toContain("already succeeded");
    await runner.close();
  });

  it(
    "the same idempotencyKey in a workspace returns the same job; a " +
      "different request with it is refused",
    async () => {
      const ws = freshWorkspace();
      const a = await admin.enqueue({ workspaceId: ws, idempotencyKey: "k" });
      const b = await admin.enqueue({ workspaceId: ws, idempotencyKey: "k" });
      expect(b.json.job.id).toBe(a.json.job.id);
      const c = await admin.enqueue({ workspaceId: ws, idempotencyKey: "k", priority: 9 });
      expect(c.status).toBe(409);
      expect(c.json.message).toContain(a.json.job.id);
      const d = await admin.enqueue({ workspaceId: freshWorkspace(), idempotencyKey: "k" });
      expect(d.json.job.id).not.toBe(a.json.job.id);
      expect(await queuedJobs(ws)).toBe(1);
      // Jobs without a key are never compared (jobs_idempotency holds only keyed jobs).
      const keyless = await Promise.all([1, 2].map(() => admin.enqueue({ workspaceId: ws })));
      expect(new Set(keyless.map((r) => r.json.job.id)).size).toBe(2);
      expect(await queuedJobs(ws)).toBe(3);
    },
  );

  it("concurrent enqueues with one idempotencyKey store one job and answer it to every one of them", async () => {
    const ws = freshWorkspace();
    const replies = await Promise.all(
      Array.from({ length: 12 }, () =>
        admin.enqueue({ workspaceId: ws, idempotencyKey: "same", priority: 3 }),
      ),
    );
    expect(replies.map((r) => r.status)).toEqual(replies.map(() => 200));
    expect(new Set(replies.map((r) => r.json.job.id)).size).toBe(1);
    expect(await queuedJobs(ws)).toBe(1);
  });

  it("job listing is newest first and paged", async () => {
    const ws = freshWorkspace();
    const ids = [];
    for (let i = 0; i < 5; i++) ids.push((await admin.enqueue({ workspaceId: ws })).json.job.id);
    const seen: string[] = [];
    let token = "";
    do {
      const page = await admin.rest.request(
        "GET",
        `/v1/admin/jobs?workspaceId=${ws}&pageSize=2${token ? `&pageToken=${token}` : ""}`,
      );
      expect(page.json.jobs.length).toBeLessThanOrEqual(2);
      seen.push(...page.json.jobs.map((j: { id: string }) => j.id));
      token = page.json.nextPageToken ?? "";
    } while (token);
    expect(seen).toEqual([...ids].reverse());
  });

  it("admin runners lists registrations with live leases", async () => {
    const ws = freshWorkspace();
    const runner = await registeredRunner(cp, "r9", ws, { slots: 3, labels: ["linux", "arm"] });
    await admin.enqueue({ workspaceId: ws });
    await runner.claim();
    const reply = await admin.rest.request("GET", `/v1/admin/runners?workspaceId=${ws}`);
    expect(reply.json.runners).toEqual([
      expect.objectContaining({
        runnerId: "r9",
        workspaceId: ws,
        slots: 3,
        labels: ["arm", "linux"],
        liveLeases: 1,
      }),
    ]);
    await runner.close();
  });

  it("admin routes refuse identities not granted admin, runners included", async () => {
    const runner = await runnerActor(cp, "r1", "w1");
    const reply = await runner.rest.request("POST", "/v1/admin/jobs", {
      apiVersion: "v1",
      workspaceId: "w1",
      spec: { argv: ["true"] },
    });
    expect(reply.status).toBe(403);
    expect(reply.json.message).toContain(
      "runner identities (spiffe://forelead/runners/r1/workspaces/w1) can never call admin methods",
    );
    const other = createTestClient(
      AdminService,
      cp.url,
      cp.pki.ca.certPem,
      await cp.pki.service("someone-else"),
      "connect-json",
    );
    await expect(other.listRunners({})).rejects.toMatchObject({ code: Code.PermissionDenied });
    await runner.close();
  });
});

describe(`bad input is refused clearly and leaves the queue unchanged (${databaseKind})`, () => {
  it(
    "lease calls: unknown job 404, job of another workspace 404, malformed " +
      "id 400, bad token 409, wrong outcome 400",
    async () => {
      const ws = freshWorkspace();
      const jobId = (await admin.enqueue({ workspaceId: ws })).json.job.id;
      const runner = await registeredRunner(cp, "r1", ws);
      const { token } = (await runner.claim()).json;
      const unknown = await runner.renew("01a226bc-0000-7000-8000-000000000000", token);
      expect(unknown.status).toBe(404);
      expect(unknown.json.message).toContain("not found");
      const outsider = await registeredRunner(cp, "r1", freshWorkspace());
      const foreignWs = await outsider.renew(jobId, token);
      expect(foreignWs.status).toBe(404);
      const malformed = await runner.renew("not-a-job", token);
      expect(malformed.status).toBe(400);
      expect(malformed.json.message).toContain("not a job id");
      const badToken = await runner.renew(jobId, "AAAA");
      expect(badToken.status).toBe(409);
      expect(badToken.json.message).toContain("not a lease of this runner on job");
      const missingToken = await runner.renew(jobId, "");
      expect(missingToken.status).toBe(400);
      const wrongOutcome = await runner.complete(jobId, token, { outcome: "done" });
      expect(wrongOutcome.status).toBe(400);
      expect(wrongOutcome.json.message).toContain(
        'outcome "done" is not one of succeeded, failed, cancelled',
      );
      expect((await admin.job(jobId)).json.job).toMatchObject({ state: "running", attempts: 1 });
      // The lease still works after all of that.
      expect((await runner.complete(jobId, token)).json.job.state).toBe("succeeded");
      await Promise.all([runner.close(), outsider.close()]);
    },
  );

  it(
    "another runner's token on the job is refused (409) with the words a " +
      "made-up token gets: nothing confirms a live lease",
    async () => {
      const ws = freshWorkspace();
      const jobId = (await admin.enqueue({ workspaceId: ws })).json.job.id;
      const owner = await registeredRunner(cp, "owner", ws);
      const thief = await registeredRunner(cp, "thief", ws);
      const { token } = (await owner.claim()).json;
      const stolen = await thief.complete(jobId, token);
      expect(stolen.status).toBe(409);
      const madeUp = await thief.complete(jobId, "AAAA");
      expect(stolen.json).toEqual(madeUp.json);
      expect(stolen.json.message).toBe(
        `the lease token is not a lease of this runner on job ${jobId}; use the ` +
          `token from the claim that leased this job`,
      );
      expect((await admin.job(jobId)).json.job.state).toBe("running");
      await Promise.all([owner.close(), thief.close()]);
    },
  );

  it.each([
    [-1, "waitSeconds must be 0 to 20; got -1"],
    [21, "waitSeconds must be 0 to 20; got 21"],
    [100000, "waitSeconds must be 0 to 20"],
  ])("waitSeconds %s is refused", async (waitSeconds, message) => {
    const ws = freshWorkspace();
    await admin.enqueue({ workspaceId: ws });
    const runner = await registeredRunner(cp, "r1", ws);
    const reply = await runner.claim({ waitSeconds });
    expect(reply.status).toBe(400);
    expect(reply.json.message).toContain(message);
    expect(await queuedJobs(ws)).toBe(1);
    await runner.close();
  });

  it("a claim before registering is refused and takes nothing", async () => {
    const ws = freshWorkspace();
    await admin.enqueue({ workspaceId: ws });
    const runner = await runnerActor(cp, "unregistered", ws);
    const reply = await runner.claim();
    expect(reply.status).toBe(400);
    expect(reply.json).toMatchObject({ code: "failed_precondition" });
    expect(reply.json.message).toContain("POST /v1/runner/register first");
    expect(await queuedJobs(ws)).toBe(1);
    await runner.close();
  });

  it("registration with slots 0 or labels that are not strings is refused", async () => {
    const runner = await runnerActor(cp, "r1", freshWorkspace());
    const zero = await runner.register({ slots: 0 });
    expect(zero.status).toBe(400);
    expect(zero.json.message).toContain("slots must be between 1 and");
    const notStrings = await runner.register({ labels: [1, { a: 1 }] });
    expect(notStrings.status).toBe(400);
    expect(notStrings.json.message).toContain("labels");
    await runner.close();
  });

  it("an enqueue with bad fields is refused by name and stores nothing", async () => {
    const ws = freshWorkspace();
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ spec: { image: "busybox", argv: [] } }, "spec.argv is required"],
      [{ spec: undefined }, "spec is required"],
      [{ labels: ["ok", "no spaces"] }, 'labels[1] "no spaces" is not a label'],
      [{ maxAttempts: 1000 }, "maxAttempts must be 1 to 100"],
      [{ spec: { image: "busybox", argv: ["true"], env: { "A-B": "1" } } }, 'spec.env key "A-B"'],
      [{ spec: { image: "busybox", argv: ["true"], timeoutSeconds: -5 } }, "spec.timeoutSeconds"],
      [{ repository: "app", targetBranch: "main" }, 'repository "app" is not registered'],
      [{ workspaceId: "bad/ws" }, 'workspaceId "bad/ws"'],
      [{ spec: { image: "busybox", argv: "make test" } }, 'field "argv"'],
    ];
    for (const [overrides, message] of cases) {
      const reply = await admin.enqueue({ workspaceId: ws, ...overrides });
      expect(reply.status, JSON.stringify(overrides)).toBe(400);
      expect(reply.json.message).toContain(message);
    }
    expect(await queuedJobs(ws)).toBe(0);
  });

  it("a generated client gets the same codes: NotFound, Aborted, InvalidArgument", async () => {
    const ws = freshWorkspace();
    const cert = await cp.pki.runner("c1", ws);
    const client = createTestClient(RunnerService, cp.url, cp.pki.ca.certPem, cert, "connect-json");
    await client.register({ apiVersion: "v1", runnerId: "c1", workspaceId: ws, slots: 1 });
    const jobId = (await admin.enqueue({ workspaceId: ws, labels: [] })).json.job.id;
    const { lease } = await client.claim({ apiVersion: "v1", runnerId: "c1" });
    const codeOf = (p: Promise<unknown>) =>
      p.then(
        () => undefined,
        (e) => ConnectError.from(e).code,
      );
    expect(
      await codeOf(
        client.renew({
          apiVersion: "v1",
          jobId: "01a226bc-0000-7000-8000-000000000000",
          leaseToken: lease!.token,
        }),
      ),
    ).toBe(Code.NotFound);
    expect(await codeOf(client.renew({ apiVersion: "v1", jobId, leaseToken: "nope" }))).toBe(
      Code.Aborted,
    );
    expect(await codeOf(client.claim({ apiVersion: "v1", runnerId: "c1", waitSeconds: -1 }))).toBe(
      Code.InvalidArgument,
    );
  });
});
