import "reflect-metadata";
import { sql } from "kysely";
import { describe, expect, it } from "vitest";
import { registeredRunner } from "../support/actors.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";

// Concurrency-group policies (issue 49): what an enqueue into a group does to the jobs of its key
// already there, applied under the group's lock (src/broker/jobs/group-policy.ts).
const cp = useControlPlane();
const { admin } = cp;

const group = (key: string, extra: Record<string, unknown> = {}) => ({
  concurrencyKey: key,
  concurrencyLimit: 1,
  ...extra,
});

async function enqueued(ws: string, body: Record<string, unknown>) {
  const reply = await admin.enqueue({ workspaceId: ws, ...body });
  expect(reply.status, reply.text).toBe(200);
  return reply.json.job as { id: string; state: string };
}

async function statesOf(ws: string) {
  const { rows } = await sql<{ id: string; state: string; cancelled_by: string | null }>`
    select id, state, cancelled_by from jobs where workspace_id = ${ws}
    order by created_at, id`.execute(cp.plane.store.db);
  return rows;
}

describe(`concurrency-group policies (${databaseKind})`, () => {
  it("keep_newest: 50 concurrent enqueues of one key leave exactly one pending, each cancellation naming its cause", async () => {
    const ws = "pol-newest";
    const replies = await Promise.all(
      Array.from({ length: 50 }, () =>
        admin.enqueue({
          workspaceId: ws,
          ...group("deploy", { concurrencyPolicy: "keep_newest" }),
        }),
      ),
    );
    for (const r of replies) expect(r.status, r.text).toBe(200);
    const rows = await statesOf(ws);
    expect(rows).toHaveLength(50);
    expect(rows.filter((r) => r.state === "queued")).toHaveLength(1);
    const cancelled = rows.filter((r) => r.state === "cancelled");
    expect(cancelled).toHaveLength(49);
    const ids = new Set(rows.map((r) => r.id));
    for (const c of cancelled) {
      const cause = /^job ([0-9a-f-]{36}) \(keep_newest\)$/.exec(c.cancelled_by ?? "");
      expect(cause, c.cancelled_by ?? "").not.toBeNull();
      expect(ids.has(cause![1]!) && cause![1] !== c.id).toBe(true);
    }
    const view = await admin.job(cancelled[0]!.id);
    expect(view.json.job.failure.message).toMatch(
      /^cancelled by job .* \(keep_newest\) before it was claimed$/,
    );
  });

  it("cancel_in_progress: the running job is asked to cancel, naming the new job; a completion racing it settles each job once", async () => {
    const ws = "pol-cancel";
    const runner = await registeredRunner(cp, "pol-cancel-1", ws, { slots: 4 });
    for (let round = 0; round < 10; round++) {
      await enqueued(ws, group(`g${round}`));
      const claim = await runner.claim({ waitSeconds: 0 });
      expect(claim.status, claim.text).toBe(200);
      const running = claim.json.job.id as string;
      // The completion and the enqueue that cancels the running job, at once.
      const [done, next] = await Promise.all([
        runner.complete(running, claim.json.token),
        admin.enqueue({
          workspaceId: ws,
          ...group(`g${round}`, { concurrencyPolicy: "cancel_in_progress" }),
        }),
      ]);
      expect(next.status, next.text).toBe(200);
      expect(done.status, done.text).toBe(200);
      const settled = (await admin.job(running)).json.job;
      // Settled once, by the completion, whichever of the two came first.
      expect(["succeeded", "cancelled"]).toContain(settled.state);
      const events = await sql<{ n: number }>`select count(*)::int as n from events
        where job_id = ${running} and type = 'job.settled'`.execute(cp.plane.store.db);
      expect(events.rows[0]!.n).toBe(1);
      const claimNext = await runner.claim({ waitSeconds: 0 });
      expect(claimNext.status, claimNext.text).toBe(200);
      expect(claimNext.json.job.id).toBe(next.json.job.id);
      // A third enqueue while the second runs: it is asked to cancel, naming the third.
      const third = await enqueued(
        ws,
        group(`g${round}`, { concurrencyPolicy: "cancel_in_progress" }),
      );
      const renew = await runner.renew(next.json.job.id, claimNext.json.token);
      expect(renew.status, renew.text).toBe(200);
      expect(renew.json.cancelRequested).toBe(true);
      const [row] = (await statesOf(ws)).filter((r) => r.id === next.json.job.id);
      expect(row!.cancelled_by).toBe(`job ${third.id} (cancel_in_progress)`);
      await runner.complete(next.json.job.id, claimNext.json.token, {
        outcome: "cancelled",
        exitCode: 143,
      });
      await admin.cancel(third.id);
    }
  });

  it("maxPending: onFull reject refuses with 429 naming the group and stores nothing; replace_oldest cancels the oldest pending", async () => {
    const ws = "pol-max";
    const first = await enqueued(ws, group("q", { maxPending: 2 }));
    const second = await enqueued(ws, group("q", { maxPending: 2 }));
    const refused = await admin.enqueue({ workspaceId: ws, ...group("q", { maxPending: 2 }) });
    expect(refused.status, refused.text).toBe(429);
    expect(refused.json.message).toContain(
      'concurrency group "q" of workspace "pol-max" has 2 jobs pending',
    );
    expect(await statesOf(ws)).toHaveLength(2);
    const replacing = await enqueued(ws, group("q", { maxPending: 2, onFull: "replace_oldest" }));
    const rows = await statesOf(ws);
    expect(rows.map((r) => [r.id, r.state])).toEqual([
      [first.id, "cancelled"],
      [second.id, "queued"],
      [replacing.id, "queued"],
    ]);
    expect(rows[0]!.cancelled_by).toBe(`job ${replacing.id} (replace_oldest)`);
  });

  it("a policy on a job without a group, or an unknown one, is a 400 and nothing is stored", async () => {
    const ws = "pol-bad";
    for (const body of [
      { concurrencyPolicy: "keep_newest" },
      { maxPending: 3 },
      group("k", { concurrencyPolicy: "newest" }),
      group("k", { onFull: "drop" }),
      group("k", { onFull: "reject" }),
      group("k", { maxPending: -1 }),
    ]) {
      const reply = await admin.enqueue({ workspaceId: ws, ...body });
      expect(reply.status, reply.text).toBe(400);
    }
    const noGroup = await admin.enqueue({ workspaceId: ws, concurrencyPolicy: "keep_newest" });
    expect(noGroup.json.message).toBe(
      "concurrencyPolicy, maxPending and onFull need a concurrencyKey: the group they act on",
    );
    expect(await statesOf(ws)).toEqual([]);
  });
});
