// Claims and completions that arrive together share one transaction
// (src/broker/leases/batches.ts). These tests hold the batched path to the
// rules of the single-request path: slots, labels, one lease per job,
// idempotent completion. Over REST with one batch in flight (so concurrent
// requests queue and go together), and on the batch functions directly for
// the cases arrival order cannot force (repeats inside one batch).
import { beforeAll, describe, expect, it } from "vitest";
import { claimBatch, completeBatch } from "../../src/broker/leases/batches.js";
import type { LeaseView } from "../../src/broker/leases/views.js";
import { register } from "../../src/broker/fleet/registrations.js";
import type { Store } from "../../src/store/database.js";
import { registeredRunner } from "../support/actors.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";
import { useTestStore } from "../support/store.js";

// One batch at a time: requests arriving while it runs wait and go together.
const cp = useControlPlane({ batching: { maxBatch: 64, maxInFlight: 1 } });
const { admin } = cp;
let wsCounter = 0;
const freshWorkspace = () => `bw${++wsCounter}`;

describe(`batched claims and completions over REST (${databaseKind})`, () => {
  it("concurrent claims never exceed a runner's slots, never lease a job twice, and respect labels", async () => {
    const ws = freshWorkspace();
    for (let i = 0; i < 12; i++)
      expect((await admin.enqueue({ workspaceId: ws })).status).toBe(200);
    for (let i = 0; i < 3; i++)
      expect((await admin.enqueue({ workspaceId: ws, labels: ["linux", "gpu"] })).status).toBe(200);
    const two = await registeredRunner(cp, "two", ws, { slots: 2 });
    const three = await registeredRunner(cp, "three", ws, { slots: 3 });
    const gpu = await registeredRunner(cp, "gpu", ws, { slots: 10, labels: ["linux", "gpu"] });
    const claims = await Promise.all([
      ...Array.from({ length: 6 }, () => two.claim()),
      ...Array.from({ length: 6 }, () => three.claim()),
      ...Array.from({ length: 4 }, () => gpu.claim()),
    ]);
    const leased = (from: number, to: number) =>
      claims.slice(from, to).filter((c) => c.status === 200);
    expect(claims.every((c) => c.status === 200 || c.status === 204)).toBe(true);
    expect(leased(0, 6)).toHaveLength(2);
    expect(leased(6, 12)).toHaveLength(3);
    expect(leased(12, 16)).toHaveLength(4);
    for (const c of [...leased(0, 6), ...leased(6, 12)])
      expect(c.json.job.labels).toEqual(["linux"]);
    const ids = claims.filter((c) => c.status === 200).map((c) => c.json.job.id);
    expect(new Set(ids).size).toBe(ids.length);
    await Promise.all([two.close(), three.close(), gpu.close()]);
  });

  it("concurrent completions settle every job once, each with its own reply", async () => {
    const ws = freshWorkspace();
    const runners = await Promise.all(
      Array.from({ length: 8 }, (_, i) => registeredRunner(cp, `c${i}`, ws)),
    );
    for (let i = 0; i < 8; i++) await admin.enqueue({ workspaceId: ws });
    const leases = await Promise.all(runners.map((r) => r.claim()));
    expect(leases.map((l) => l.status)).toEqual(Array(8).fill(200));
    const done = await Promise.all(
      runners.map((r, i) =>
        r.complete(
          leases[i]!.json.job.id,
          leases[i]!.json.token,
          i % 2 ? { outcome: "failed", exitCode: 3 } : {},
        ),
      ),
    );
    done.forEach((d, i) => {
      expect(d.status, d.text).toBe(200);
      expect(d.json.job.id).toBe(leases[i]!.json.job.id);
      expect(d.json.job.state).toBe(i % 2 ? "failed" : "succeeded");
    });
    for (const [i, l] of leases.entries())
      expect((await admin.job(l.json.job.id)).json.job.state).toBe(i % 2 ? "failed" : "succeeded");
    await Promise.all(runners.map((r) => r.close()));
  });
});

describe(`batch functions (${databaseKind})`, () => {
  const testStore = useTestStore();
  let store: Store;
  beforeAll(() => void (store = testStore()));

  /** The token and job id of a claim that leased a job (fails the test otherwise). */
  function leaseOf(r: PromiseSettledResult<LeaseView | undefined> | undefined): {
    token: string;
    job: { id: string };
  } {
    if (r?.status !== "fulfilled" || !r.value)
      throw new Error(`expected a lease, got ${JSON.stringify(r)}`);
    return { token: r.value.token!, job: { id: String(r.value.job.id) } };
  }

  async function setup(ws: string, jobs: number, runners: Array<{ id: string; slots: number }>) {
    for (const r of runners)
      await register(
        store.db,
        {
          workspaceId: ws,
          runnerId: r.id,
          slots: r.slots,
          cpu: 1,
          memoryBytes: 1,
          architecture: "amd64",
          labels: ["linux"],
          clockOffsetNs: 0,
        },
        30,
      );
    const { defaultJobTimeouts } = await import("../../src/broker/jobs/rules.js");
    const { enqueueJob } = await import("../../src/broker/jobs/enqueue.js");
    for (let i = 0; i < jobs; i++) {
      await enqueueJob(
        store.db,
        {
          workspaceId: ws,
          labels: ["linux"],
          repository: "",
          targetBranch: "",
          spec: {
            image: "busybox",
            argv: ["true"],
            env: {},
            timeoutSeconds: 0,
            cpu: 0,
            memoryBytes: 0,
          },
          maxAttempts: 2,
          priority: 0,
          idempotencyKey: "",
          kind: "",
        },
        defaultJobTimeouts,
      );
    }
  }

  it(
    "one batch gives a runner at most its free slots, in arrival order, and " +
      "refuses an unregistered runner alone",
    async () => {
      const ws = freshWorkspace();
      await setup(ws, 5, [
        { id: "a", slots: 2 },
        { id: "b", slots: 1 },
      ]);
      const a = { workspaceId: ws, runnerId: "a" };
      const b = { workspaceId: ws, runnerId: "b" };
      const results = await claimBatch(
        store.db,
        [a, b, a, { workspaceId: ws, runnerId: "ghost" }, a, b],
        30,
      );
      expect(
        results.map((r) => (r.status === "rejected" ? "refused" : r.value ? "lease" : "none")),
      ).toEqual(["lease", "lease", "lease", "refused", "none", "none"]);
      const refused = results[3] as PromiseRejectedResult;
      expect(String(refused.reason)).toMatch(/not registered/);
      const leases = results.flatMap((r) => (r.status === "fulfilled" && r.value ? [r.value] : []));
      expect(new Set(leases.map((l) => l.job.id)).size).toBe(3);
      // The oldest jobs went first, in the order the requests arrived.
      const again = await claimBatch(store.db, [a, b], 30);
      expect(again.every((r) => r.status === "fulfilled" && r.value === undefined)).toBe(true);
    },
  );

  it(
    "a completion repeated in one batch gets the same reply; a different one " +
      "for the same lease gets 409",
    async () => {
      const ws = freshWorkspace();
      await setup(ws, 2, [{ id: "r", slots: 2 }]);
      const holder = { workspaceId: ws, runnerId: "r" };
      const [first, second] = await claimBatch(store.db, [holder, holder], 30);
      const l1 = leaseOf(first);
      const l2 = leaseOf(second);
      const completion = (l: typeof l1, completionId: string, outcome = "succeeded") => ({
        ...holder,
        jobId: l.job.id,
        leaseToken: l.token,
        completionId,
        outcome,
        exitCode: 0,
        error: undefined,
      });
      const results = await completeBatch(store.db, [
        completion(l1, "x"),
        completion(l1, "x"),
        completion(l2, "y"),
        completion(l2, "z", "failed"),
        { ...completion(l2, "w"), outcome: "bogus" },
      ]);
      expect(results.map((r) => r.status)).toEqual([
        "fulfilled",
        "fulfilled",
        "fulfilled",
        "rejected",
        "rejected",
      ]);
      const replies = results.map((r) =>
        r.status === "fulfilled" ? (r.value as Record<string, unknown>) : undefined,
      );
      expect(replies[0]).toEqual(replies[1]);
      expect(replies[0]!.state).toBe("succeeded");
      expect(replies[2]!.state).toBe("succeeded");
      expect(String((results[3] as PromiseRejectedResult).reason)).toMatch(
        /already completed under this lease by completion "y"/,
      );
      expect(String((results[4] as PromiseRejectedResult).reason)).toMatch(
        /outcome "bogus" is not one of/,
      );
    },
  );

  it("a retryable failure settled in a batch requeues the job while attempts remain", async () => {
    const ws = freshWorkspace();
    await setup(ws, 2, [{ id: "r", slots: 2 }]);
    const holder = { workspaceId: ws, runnerId: "r" };
    const leases = (await claimBatch(store.db, [holder, holder], 30)).map(leaseOf);
    const error = { code: "infra", message: "node lost", retryable: true };
    const results = await completeBatch(
      store.db,
      leases.map((l, i) => ({
        ...holder,
        jobId: l.job.id,
        leaseToken: l.token,
        completionId: `f${i}`,
        outcome: "failed",
        exitCode: undefined,
        error,
      })),
    );
    for (const r of results)
      expect(r.status === "fulfilled" && (r.value as Record<string, unknown>).state).toBe("queued");
    const reclaimed = await claimBatch(store.db, [holder, holder], 30);
    expect(reclaimed.filter((r) => r.status === "fulfilled" && r.value)).toHaveLength(2);
  });

  it(
    "completions settled in one batch store each job's result manifest, and " +
      "a repeat with another manifest gets 409",
    async () => {
      const ws = freshWorkspace();
      await setup(ws, 3, [{ id: "r", slots: 3 }]);
      const holder = { workspaceId: ws, runnerId: "r" };
      const leases = (await claimBatch(store.db, [holder, holder, holder], 30)).map(leaseOf);
      const manifest = (i: number) => [
        {
          name: `out/report-${i}.txt`,
          digest: `sha256:${String(i).repeat(64)}`,
          size: 10 + i,
          mediaType: "text/plain",
        },
      ];
      const completion = (i: number, artifacts = manifest(i)) => ({
        ...holder,
        jobId: leases[i]!.job.id,
        leaseToken: leases[i]!.token,
        completionId: `m${i}`,
        outcome: "succeeded",
        exitCode: 0,
        error: undefined,
        artifacts,
      });
      // Job 2 fails for good: its manifest is kept too (a failed job's outputs are results).
      const failed = { ...completion(2), outcome: "failed", exitCode: 1 };
      const results = await completeBatch(store.db, [completion(0), completion(1), failed]);
      expect(results.map((r) => r.status)).toEqual(["fulfilled", "fulfilled", "fulfilled"]);
      const { getJob } = await import("../../src/broker/jobs/snapshot.js");
      for (const i of [0, 1, 2]) {
        const job = (await getJob(store.db, leases[i]!.job.id)) as unknown as {
          artifacts: unknown;
          state: string;
        };
        expect(job.state).toBe(i === 2 ? "failed" : "succeeded");
        expect(job.artifacts).toEqual(manifest(i));
      }
      // The same completion again (batched with another) gets its stored reply; another manifest is
      // refused.
      const again = await completeBatch(store.db, [completion(0), completion(1, manifest(7))]);
      expect(again[0]!.status).toBe("fulfilled");
      expect(String((again[1] as PromiseRejectedResult).reason)).toMatch(
        /already completed under this lease by completion "m1"; a different completion is refused/,
      );
    },
  );
});
