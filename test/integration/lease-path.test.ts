// Fewer round trips per job (docs/protocol.md "Claim several" and "Complete and claim"): a
// completion that also claims the runner's next lease (CompleteRequest.next), and claims of up
// to the runner's free slots in one request (ClaimLeases, maxLeases). Both keep the claim's
// rules: slots, pause, one lease per job; a refused completion claims nothing.
import { describe, expect, it } from "vitest";
import { RunnerService } from "../../gen/forelead/runner/v1/runner_pb.js";
import { eventually, registeredRunner, type RunnerActor } from "../support/actors.js";
import { createTestClient } from "../support/clients.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";
import { specFor, startTestRunner } from "../support/runner-agent.js";

const cp = useControlPlane();
const { admin } = cp;
let wsCounter = 0;
const freshWorkspace = () => `lp${++wsCounter}`;

const enqueue = async (workspaceId: string, n: number): Promise<string[]> => {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const r = await admin.enqueue({ workspaceId, priority: n - i });
    expect(r.status, r.text).toBe(200);
    ids.push(r.json.job.id);
  }
  return ids;
};
const claims = (runner: RunnerActor, body: Record<string, unknown>) =>
  runner.rest.request("POST", "/v1/runner/claims", {
    apiVersion: "v1",
    runnerId: runner.runnerId,
    ...body,
  });

describe(`complete and claim (${databaseKind})`, () => {
  it(
    "the reply carries the settled job and the runner's next lease; none " +
      "once the queue is empty after the wait",
    async () => {
      const ws = freshWorkspace();
      const [first, second] = await enqueue(ws, 2);
      const runner = await registeredRunner(cp, "r1", ws);
      const lease = await runner.claim({ waitSeconds: 0 });
      expect(lease.json.job.id).toBe(first);
      const done = await runner.complete(first!, lease.json.token, { next: { waitSeconds: 0 } });
      expect(done.status, done.text).toBe(200);
      expect(done.json.job).toMatchObject({ id: first, state: "succeeded" });
      expect(done.json.lease.job.id).toBe(second);
      expect(done.json.lease.token).toEqual(expect.any(String));
      expect((await admin.job(second!)).json.job).toMatchObject({
        state: "running",
        runnerId: "r1",
      });
      // The new lease is a lease like a claim's: it renews and completes.
      expect((await runner.renew(second!, done.json.lease.token)).status).toBe(200);
      const last = await runner.complete(second!, done.json.lease.token, {
        next: { waitSeconds: 1 },
      });
      expect(last.status, last.text).toBe(200);
      expect(last.json.job).toMatchObject({ id: second, state: "succeeded" });
      expect(last.json.lease).toBeUndefined();
      await runner.close();
    },
  );

  it("a job enqueued during the wait is leased to the waiting completion", async () => {
    const ws = freshWorkspace();
    const [only] = await enqueue(ws, 1);
    const runner = await registeredRunner(cp, "r1", ws);
    const lease = await runner.claim({ waitSeconds: 0 });
    const done = runner.complete(only!, lease.json.token, { next: { waitSeconds: 10 } });
    const settled = async () =>
      (await admin.job(only!)).json.job.state === "succeeded" ? true : undefined;
    await eventually("the completion to be settled", settled);
    const [late] = await enqueue(ws, 1);
    const reply = await done;
    expect(reply.status, reply.text).toBe(200);
    expect(reply.json.lease.job.id).toBe(late);
    await runner.close();
  });

  it("a refused completion claims nothing; a bad next is refused before the completion is taken", async () => {
    const ws = freshWorkspace();
    const [first, queued] = await enqueue(ws, 2);
    const runner = await registeredRunner(cp, "r1", ws, { slots: 2 });
    const lease = await runner.claim({ waitSeconds: 0 });
    const wrongToken = await runner.complete(first!, "x".repeat(lease.json.token.length), {
      next: { waitSeconds: 0 },
    });
    expect(wrongToken.status).toBeGreaterThanOrEqual(400);
    expect(wrongToken.status).toBeLessThan(500);
    const badWait = await runner.complete(first!, lease.json.token, { next: { waitSeconds: 21 } });
    expect(badWait.status, badWait.text).toBe(400);
    expect(badWait.json.message).toContain("waitSeconds must be 0 to 20");
    expect((await admin.job(first!)).json.job.state).toBe("running");
    expect((await admin.job(queued!)).json.job.state).toBe("queued");
    await runner.close();
  });

  it("a retried completion returns the settled job and claims only into a free slot", async () => {
    const ws = freshWorkspace();
    const [first, second, third] = await enqueue(ws, 3);
    const runner = await registeredRunner(cp, "r1", ws); // one slot
    const lease = await runner.claim({ waitSeconds: 0 });
    const done = await runner.complete(first!, lease.json.token, { next: { waitSeconds: 0 } });
    expect(done.json.lease.job.id).toBe(second);
    // The reply was "lost": the same completion again. Its slot is held by the lease of `second`.
    const again = await runner.complete(first!, lease.json.token, { next: { waitSeconds: 0 } });
    expect(again.status, again.text).toBe(200);
    expect(again.json.job).toMatchObject({ id: first, state: "succeeded" });
    expect(again.json.lease).toBeUndefined();
    expect((await admin.job(third!)).json.job.state).toBe("queued");
    // With a slot free, a retry claims again (the runner holds at most its slots).
    expect((await runner.complete(second!, done.json.lease.token)).status).toBe(200);
    const later = await runner.complete(first!, lease.json.token, { next: { waitSeconds: 0 } });
    expect(later.json.lease.job.id).toBe(third);
    await runner.close();
  });

  it(
    "completions arriving together each get their own next lease; a refused " +
      "one among them gets its error and claims nothing",
    async () => {
      const ws = freshWorkspace();
      const first = await enqueue(ws, 5);
      const runners = await Promise.all(
        Array.from({ length: 5 }, (_, i) => registeredRunner(cp, `t${i}`, ws)),
      );
      const leases: Array<{ token: string; job: { id: string } }> = [];
      for (const r of runners) leases.push((await r.claim({ waitSeconds: 0 })).json);
      const more = await enqueue(ws, 4);
      // Runner t4 sends a completion its lease does not take (a wrong token): refused, as without
      // next.
      const replies = await Promise.all(
        runners.map((r, i) =>
          r.complete(
            leases[i]!.job.id,
            i === 4 ? "y".repeat(leases[i]!.token.length) : leases[i]!.token,
            { next: { waitSeconds: 0 } },
          ),
        ),
      );
      replies.slice(0, 4).forEach((d, i) => {
        expect(d.status, d.text).toBe(200);
        expect(d.json.job).toMatchObject({ id: first[i], state: "succeeded" });
      });
      expect(replies[4]!.status).toBeGreaterThanOrEqual(400);
      const next = replies.slice(0, 4).map((d) => d.json.lease?.job.id);
      expect([...next].sort()).toEqual([...more].sort());
      expect((await admin.job(first[4]!)).json.job.state).toBe("running");
      for (const [i, id] of next.entries())
        expect((await admin.job(id)).json.job).toMatchObject({
          state: "running",
          runnerId: `t${i}`,
        });
      await Promise.all(runners.map((r) => r.close()));
    },
  );

  it("a paused runner's completion is taken and claims nothing", async () => {
    const ws = freshWorkspace();
    const [first, queued] = await enqueue(ws, 2);
    const runner = await registeredRunner(cp, "r1", ws);
    const lease = await runner.claim({ waitSeconds: 0 });
    const paused = await admin.rest.request("POST", `/v1/admin/workspaces/${ws}/pause`, {
      apiVersion: "v1",
    });
    expect(paused.status, paused.text).toBe(200);
    const done = await runner.complete(first!, lease.json.token, { next: { waitSeconds: 0 } });
    expect(done.json.job.state).toBe("succeeded");
    expect(done.json.lease).toBeUndefined();
    expect((await admin.job(queued!)).json.job.state).toBe("queued");
    await runner.close();
  });
});

describe(`claims of several leases (${databaseKind})`, () => {
  it("ClaimLeases takes up to maxLeases, bounded by free slots; lease is leases[0]", async () => {
    const ws = freshWorkspace();
    const ids = await enqueue(ws, 6);
    const runner = await registeredRunner(cp, "r1", ws, { slots: 3 });
    const one = await runner.claim({ waitSeconds: 0 });
    expect(one.json.job.id).toBe(ids[0]);
    const reply = await claims(runner, { waitSeconds: 0, maxLeases: 5 });
    expect(reply.status, reply.text).toBe(200);
    expect(reply.json.leases.map((l: { job: { id: string } }) => l.job.id)).toEqual(
      ids.slice(1, 3),
    );
    expect(reply.json.lease).toEqual(reply.json.leases[0]);
    expect(new Set(reply.json.leases.map((l: { token: string }) => l.token)).size).toBe(2);
    // Every slot held: nothing more, 204 as a claim's.
    expect((await claims(runner, { waitSeconds: 0, maxLeases: 3 })).status).toBe(204);
    for (const id of ids.slice(3)) expect((await admin.job(id)).json.job.state).toBe("queued");
    await runner.close();
  });

  it("maxLeases unset is one; out of range, and more than one on Claim, are refused with what to do", async () => {
    const ws = freshWorkspace();
    const ids = await enqueue(ws, 2);
    const runner = await registeredRunner(cp, "r1", ws, { slots: 4 });
    const tooMany = await claims(runner, { maxLeases: 33 });
    expect(tooMany.status, tooMany.text).toBe(400);
    expect(tooMany.json.message).toContain("maxLeases must be 1 to 32");
    const onClaim = await runner.claim({ maxLeases: 2 });
    expect(onClaim.status, onClaim.text).toBe(400);
    expect(onClaim.json.message).toContain("POST /v1/runner/claims");
    const single = await claims(runner, { waitSeconds: 0 });
    expect(single.json.leases.map((l: { job: { id: string } }) => l.job.id)).toEqual([ids[0]]);
    await runner.close();
  });

  it("over Connect, ClaimLeases and a completion's next answer the same", async () => {
    const ws = freshWorkspace();
    const ids = await enqueue(ws, 3);
    await registeredRunner(cp, "r1", ws, { slots: 2 }).then((r) => r.close());
    const client = createTestClient(
      RunnerService,
      cp.url,
      cp.pki.ca.certPem,
      await cp.pki.runner("r1", ws),
      "connect-json",
    );
    const claimed = await client.claimLeases({ apiVersion: "v1", runnerId: "r1", maxLeases: 2 });
    expect(claimed.leases.map((l) => l.job!.id)).toEqual(ids.slice(0, 2));
    expect(claimed.lease!.token).toBe(claimed.leases[0]!.token);
    const first = claimed.leases[0]!;
    const done = await client.complete({
      apiVersion: "v1",
      jobId: first.job!.id,
      leaseToken: first.token,
      completionId: "c1",
      outcome: "succeeded",
      next: { waitSeconds: 0 },
    });
    expect(done.job!.state).toBe("succeeded");
    expect(done.lease!.job!.id).toBe(ids[2]);
  });
});

describe(`the runner agent on the fewer-round-trip paths (${databaseKind})`, () => {
  it("claims its free slots in one request and takes the next job with each completion", async () => {
    const ws = freshWorkspace();
    const ids: string[] = [];
    for (let i = 0; i < 6; i++) {
      const r = await admin.enqueue({
        workspaceId: ws,
        priority: 6 - i,
        spec: specFor("process", { argv: ["true"] }),
      });
      expect(r.status, r.text).toBe(200);
      ids.push(r.json.job.id);
    }
    const runner = await startTestRunner(cp, {
      runnerId: "agent",
      workspaceId: ws,
      executor: "process",
      slots: 3,
    });
    try {
      for (const id of ids)
        await eventually(`job ${id} to succeed`, async () =>
          (await admin.job(id)).json.job.state === "succeeded" ? true : undefined,
        );
      const claimedBy = (how: RegExp) =>
        runner.log.filter((l) => how.test(l)).map((l) => l.split(" ").pop());
      // The first three in one claim request; each of their completions leased one of the rest.
      expect(runner.log).toContain("one claim request leased 3 jobs");
      expect(claimedBy(/^claimed job /)).toEqual(ids.slice(0, 3));
      expect(claimedBy(/^claimed \(with a completion\) job /).sort()).toEqual(ids.slice(3).sort());
    } finally {
      await runner.close();
    }
  });
});
