import "reflect-metadata";
import { chmod, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { eventually, registeredRunner } from "../support/actors.js";
import { useControlPlane } from "../support/fixture.js";
import { specFor, startTestRunner } from "../support/runner-agent.js";

// Issue 48 item 3: an admin orders a runner to drain. It gets no new lease (claims and enqueue
// handoffs skip it), hears the order in its renew and claim replies (v1's shapes unchanged), shows
// "draining", finishes what it runs and exits; no leased job is killed.
const cp = useControlPlane();
const { admin } = cp;
let scratch: string;

beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), "forelead-drain-"));
  await chmod(scratch, 0o777); // process jobs run as users of their own
});
afterAll(async () => {
  if (scratch) await rm(scratch, { recursive: true, force: true });
});

const drain = (runnerId: string, workspaceId = "") =>
  admin.rest.request("POST", `/v1/admin/runners/${runnerId}/drain`, {
    apiVersion: "v1",
    workspaceId,
  });

async function stateOf(runnerId: string): Promise<string | undefined> {
  const reply = await admin.rest.request("GET", "/v1/admin/runners");
  expect(reply.status, reply.text).toBe(200);
  return (reply.json.runners as Array<{ runnerId: string; state: string }>).find(
    (r) => r.runnerId === runnerId,
  )?.state;
}

async function enqueue(workspaceId: string, spec: Record<string, unknown> = {}) {
  const reply = await admin.enqueue({
    workspaceId,
    spec: specFor("process", { argv: ["true"], ...spec }),
  });
  expect(reply.status, reply.text).toBe(200);
  return reply.json.job.id as string;
}

describe("a drain order on the wire", () => {
  it("gives the runner no lease, says drain on ClaimLeases and renew, and keeps v1 Claim's 204", async () => {
    const runner = await registeredRunner(cp, "dr1", "drw1", { slots: 2 });
    await enqueue("drw1");
    const first = await runner.claim({ waitSeconds: 0 });
    expect(first.status, first.text).toBe(200);
    const held = first.json as { token: string; job: { id: string } };
    const ordered = await drain("dr1");
    expect(ordered.status, ordered.text).toBe(200);
    expect(ordered.json).toMatchObject({ workspaceId: "drw1" });
    expect(ordered.json.alreadyOrdered ?? false).toBe(false);
    expect((await drain("dr1", "drw1")).json.alreadyOrdered).toBe(true);
    expect(await stateOf("dr1")).toBe("draining");

    const queued = await enqueue("drw1");
    const claims = await runner.rest.request("POST", "/v1/runner/claims", {
      apiVersion: "v1",
      runnerId: "dr1",
      waitSeconds: 0,
      maxLeases: 2,
    });
    expect(claims.status, claims.text).toBe(200);
    expect(claims.json).toEqual({ drain: true });
    expect((await runner.claim({ waitSeconds: 0 })).status).toBe(204);
    expect((await admin.job(queued)).json.job.state).toBe("queued");

    // The live lease goes on, and its renewal carries the order.
    const renewed = await runner.renew(held.job.id, held.token);
    expect(renewed.status, renewed.text).toBe(200);
    expect(renewed.json.drain).toBe(true);
    // Registering again (a runner that restarts) does not clear the order.
    expect((await runner.register({ slots: 2 })).status).toBe(200);
    expect(await stateOf("dr1")).toBe("draining");
    const done = await runner.complete(held.job.id, held.token);
    expect(done.status, done.text).toBe(200);
  });

  it("answers a waiting claim at once, and an enqueue hands the drained runner nothing", async () => {
    const runner = await registeredRunner(cp, "dr2", "drw2");
    const waiting = runner.claim({ waitSeconds: 20 });
    // The claim is waiting once the runner was seen claiming; the order wakes it.
    await new Promise((r) => setTimeout(r, 300));
    expect((await drain("dr2")).status).toBe(200);
    expect((await waiting).status).toBe(204);
    const job = await enqueue("drw2");
    expect((await admin.job(job)).json.job.state).toBe("queued");
  });

  it("is audited and evented, refused for a runner nobody registered", async () => {
    await registeredRunner(cp, "dr3", "drw3");
    expect((await drain("dr3")).status).toBe(200);
    const events = await admin.rest.request(
      "GET",
      "/v1/admin/events?workspaceId=drw3&types=runner.drain_ordered",
    );
    expect(events.status, events.text).toBe(200);
    expect(events.text).toContain('"runnerId":"dr3"');
    const unknown = await drain("nobody-here");
    expect(unknown.status, unknown.text).toBe(404);
  });
});

describe("a drain racing a claim", () => {
  it("loses no job and leaves a lease it lost the race to running", async () => {
    // Each round: a fresh runner, a queued job, then its claim and the drain order sent together.
    // Whichever commits first, the job is either leased to the runner (and its renewals carry the
    // order, and it completes) or still queued for another runner: never both, never neither.
    let leased = 0;
    for (let i = 0; i < 12; i++) {
      const runnerId = `drace-${i}`;
      const runner = await registeredRunner(cp, runnerId, "drwr");
      const job = await enqueue("drwr");
      const [claim, ordered] = await Promise.all([
        runner.rest.request("POST", "/v1/runner/claims", {
          apiVersion: "v1",
          runnerId,
          waitSeconds: 0,
        }),
        drain(runnerId),
      ]);
      expect(ordered.status, ordered.text).toBe(200);
      expect([200, 204]).toContain(claim.status);
      const lease = (claim.json?.leases as Array<{ token: string; job: { id: string } }>)?.[0];
      if (lease) {
        leased++;
        expect(lease.job.id).toBe(job);
        const renewed = await runner.renew(job, lease.token);
        expect(renewed.status, renewed.text).toBe(200);
        expect(renewed.json.drain).toBe(true);
        expect((await runner.complete(job, lease.token)).status).toBe(200);
        expect((await admin.job(job)).json.job.state).toBe("succeeded");
      } else {
        expect(claim.status === 204 || claim.json.drain === true).toBe(true);
        expect((await admin.job(job)).json.job.state).toBe("queued");
        expect(await stateOf(runnerId)).toBe("draining");
        // Taken by a runner that was not drained: the job is not lost.
        const other = await registeredRunner(cp, `${runnerId}-other`, "drwr");
        const taken = await other.claim({ waitSeconds: 0 });
        expect(taken.status, taken.text).toBe(200);
        expect(taken.json.job.id).toBe(job);
        expect((await other.complete(job, taken.json.token)).status).toBe(200);
      }
    }
    // Both outcomes are legal; the count is printed, not asserted (it depends on scheduling).
    console.log(`drain raced a claim 12 times: ${leased} claim(s) leased first`);
  });
});

describe("a runner agent ordered to drain", () => {
  it("finishes its running job, takes no other and exits", async () => {
    const go = join(scratch, "go");
    const runner = await startTestRunner(cp, {
      runnerId: "dr4",
      workspaceId: "drw4",
      executor: "process",
    });
    try {
      const running = await enqueue("drw4", {
        argv: ["sh", "-c", `while [ ! -e ${go} ]; do sleep 0.05; done`],
      });
      await eventually("the job to run", async () =>
        (await admin.job(running)).json.job.state === "running" ? true : undefined,
      );
      expect((await drain("dr4")).status).toBe(200);
      const waiting = await enqueue("drw4");
      // The order reaches the agent through its lease's renewal; then it lets the job finish.
      await eventually("the agent to hear the order", async () =>
        runner.log.some((l) => l.includes("ordered to drain")) ? true : undefined,
      );
      await writeFile(go, "");
      const end = await runner.agent.stopped;
      expect(end.reason).toBe("drain-ordered");
      expect((await admin.job(running)).json.job.state).toBe("succeeded");
      expect((await admin.job(waiting)).json.job.state).toBe("queued");
    } finally {
      await runner.close();
    }
  });

  it("exits at once when idle", async () => {
    const runner = await startTestRunner(cp, {
      runnerId: "dr5",
      workspaceId: "drw5",
      executor: "process",
    });
    try {
      await eventually("the runner to register", async () =>
        (await stateOf("dr5")) === "idle" ? true : undefined,
      );
      expect((await drain("dr5")).status).toBe(200);
      expect((await runner.agent.stopped).reason).toBe("drain-ordered");
    } finally {
      await runner.close();
    }
  });
});
