// The direct handoff (src/broker/leases/handoff.ts): an enqueue that finds a claim
// waiting on its replica leases the job to that claim's runner in the
// enqueue's own statement, and the waiting claim answers with the lease. The
// lease rules stay forelead_claim's: a runner that cannot take the job is not
// handed it, and a job handed off is running before any other replica can
// see it, so it is never leased twice.
import { randomBytes } from "node:crypto";
import { sql, type Transaction } from "kysely";
import type { Database } from "../../src/store/schema.js";
import { describe, expect, it } from "vitest";
import { adminActor, eventually, registeredRunner, type RunnerActor } from "../support/actors.js";
import type { RestReply } from "../support/clients.js";
import { startTestControlPlane } from "../support/control-plane.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";
import { scrape } from "../support/metrics.js";

const loopback = { host: "127.0.0.1", port: 0 };

describe(`the direct handoff (${databaseKind})`, () => {
  const cp = useControlPlane({ metricsListen: loopback });
  const { admin } = cp;
  let wsCounter = 0;
  const freshWorkspace = () => `hw${++wsCounter}`;
  const metric = async (name: string) => (await scrape(cp.plane.metrics!.url)).value(name);
  /**
   * Resolves once `n` long-poll claims wait on the control plane (its forelead_claims_waiting
   * gauge).
   */
  const claimsWaiting = (n: number) =>
    eventually(`${n} claims waiting`, async () =>
      (await metric("forelead_claims_waiting")) === n ? true : undefined,
    );
  const eventTypes = async (jobId: string) =>
    (
      await sql<{
        type: string;
      }>`select type from events where job_id = ${jobId} order by id`.execute(cp.plane.store.db)
    ).rows.map((r) => r.type);
  const leaseCount = async (jobId: string) =>
    Number(
      (
        await sql<{ n: string }>`select count(*) as n from leases where job_id = ${jobId}`.execute(
          cp.plane.store.db,
        )
      ).rows[0]!.n,
    );

  it(
    "an enqueue while a runner waits leases the job to it in its own " +
      "statement: the reply says running, the claim answers with that lease, " +
      "queued comes before leased",
    async () => {
      const ws = freshWorkspace();
      const runner = await registeredRunner(cp, "r1", ws);
      const handedBefore = await metric("forelead_leases_handed_off_total");
      const waiting = runner.claim({ waitSeconds: 20 });
      await claimsWaiting(1);
      const enq = await admin.enqueue({ workspaceId: ws });
      expect(enq.status, enq.text).toBe(200);
      expect(enq.json.job).toMatchObject({ state: "running", runnerId: "r1", attempts: 1 });
      expect(enq.json.job.waiting).toBeUndefined();
      const claim = await waiting;
      expect(claim.status, claim.text).toBe(200);
      expect(claim.json).toMatchObject({
        apiVersion: "v1",
        attempt: 1,
        job: { id: enq.json.job.id, workspaceId: ws, kind: "command" },
      });
      expect(claim.json.token).toMatch(/^[A-Za-z0-9_-]{43}$/);
      expect(enq.text).not.toContain(claim.json.token);
      expect(await metric("forelead_leases_handed_off_total")).toBe(handedBefore + 1);
      expect(await metric("forelead_claims_waiting")).toBe(0);
      expect(await eventTypes(enq.json.job.id)).toEqual(["job.queued", "job.leased"]);
      expect(await leaseCount(enq.json.job.id)).toBe(1);
      // The handed lease is an ordinary lease: renewed and completed with the claim's token.
      expect((await runner.renew(enq.json.job.id, claim.json.token)).status).toBe(200);
      const done = await runner.complete(enq.json.job.id, claim.json.token);
      expect(done.status, done.text).toBe(200);
      expect(done.json.job).toMatchObject({ state: "succeeded", attempts: 1 });
      await runner.close();
    },
  );

  it(
    "the claim's rules decide: a waiting runner without the job's labels is " +
      "not handed it, the job stays queued and says why, and a runner with " +
      "them takes it",
    async () => {
      const ws = freshWorkspace();
      const plain = await registeredRunner(cp, "plain", ws, { labels: ["linux"] });
      const handedBefore = await metric("forelead_leases_handed_off_total");
      const plainWaits = plain.claim({ waitSeconds: 2 });
      await claimsWaiting(1);
      const enq = await admin.enqueue({ workspaceId: ws, labels: ["linux", "gpu"] });
      expect(enq.status, enq.text).toBe(200);
      expect(enq.json.job).toMatchObject({
        state: "queued",
        waiting: { code: "missing_labels", missingLabels: ["gpu"] },
      });
      expect((await plainWaits).status).toBe(204);
      const gpu = await registeredRunner(cp, "gpu", ws, { labels: ["linux", "gpu"] });
      const claim = await gpu.claim();
      expect(claim.status, claim.text).toBe(200);
      expect(claim.json.job.id).toBe(enq.json.job.id);
      expect(await metric("forelead_leases_handed_off_total")).toBe(handedBefore);
      await Promise.all([plain.close(), gpu.close()]);
    },
  );

  it(
    "a job with secrets, or one not due yet, is not handed off; the secrets " +
      "job still reaches the waiting runner through its notification",
    async () => {
      const ws = freshWorkspace();
      const runner = await registeredRunner(cp, "r1", ws);
      const handedBefore = await metric("forelead_leases_handed_off_total");
      const later = await admin.enqueue({ workspaceId: ws, delaySeconds: 3600 });
      expect(later.json.job).toMatchObject({ state: "queued", waiting: { code: "scheduled" } });
      const waiting = runner.claim({ waitSeconds: 20 });
      await claimsWaiting(1);
      const token = "handoff-secret-value-4d1c";
      const enq = await admin.enqueue({ workspaceId: ws, secrets: { API_TOKEN: token } });
      expect(enq.json.job.state).toBe("queued");
      const claim = await waiting;
      expect(claim.status, claim.text).toBe(200);
      expect(claim.json.job.id).toBe(enq.json.job.id);
      expect(claim.json.secrets).toEqual({ API_TOKEN: token });
      expect(await metric("forelead_leases_handed_off_total")).toBe(handedBefore);
      await runner.close();
    },
  );

  it(
    "an enqueue whose handoff leases nothing still waits for its WAL flush: " +
      "forelead_handoff puts back the synchronous_commit that forelead_claim " +
      "turns off when it leases nothing",
    async () => {
      const ws = freshWorkspace();
      const runner = await registeredRunner(cp, "r1", ws);
      const hash = () => randomBytes(32).toString("hex");
      const commitMode = async (call: (tx: Transaction<Database>) => Promise<unknown>) =>
        cp.plane.store.db.transaction().execute(async (tx) => {
          await call(tx);
          return (
            await sql<{
              mode: string;
            }>`select current_setting('synchronous_commit') as mode`.execute(tx)
          ).rows[0]!.mode;
        });
      const before = await commitMode(async () => {});
      expect(before).toBe("on");
      // Nothing is queued in the workspace: both lease nothing.
      expect(
        await commitMode((tx) =>
          sql`select * from forelead_claim(array[${ws}], array['r1'], array[${hash()}], 30)`.execute(
            tx,
          ),
        ),
      ).toBe("off");
      expect(
        await commitMode((tx) =>
          sql`select * from forelead_handoff(${ws}, 'r1', ${hash()}, 30)`.execute(tx),
        ),
      ).toBe(before);
      // A runner that is not registered (retired while it waited) gets no lease, not an error that
      // would fail the enqueue.
      expect(
        await commitMode((tx) =>
          sql`select * from forelead_handoff(${ws}, 'nobody', ${hash()}, 30)`.execute(tx),
        ),
      ).toBe(before);
      await runner.close();
    },
  );

  it(
    "a waiting claim whose runner has no free slot is not handed the job: it " +
      "is announced, and the runner's next claim after its completion takes it",
    async () => {
      const ws = freshWorkspace();
      const runner = await registeredRunner(cp, "r1", ws, { slots: 1 });
      const first = await admin.enqueue({ workspaceId: ws });
      const held = await runner.claim();
      expect(held.json.job.id).toBe(first.json.job.id);
      // The runner's one slot is taken; a second request of it waits (a runner agent asks only for
      // free slots, a hand-written client may not).
      const waiting = runner.claim({ waitSeconds: 2 });
      await claimsWaiting(1);
      const second = await admin.enqueue({ workspaceId: ws });
      expect(second.json.job).toMatchObject({ state: "queued" });
      expect((await waiting).status).toBe(204);
      expect((await runner.complete(first.json.job.id, held.json.token)).status).toBe(200);
      const next = await runner.claim();
      expect(next.json.job.id).toBe(second.json.job.id);
      await runner.close();
    },
  );
});

describe.runIf(databaseKind === "postgres")(
  "the direct handoff across two replicas on one Postgres",
  () => {
    it(
      "a job handed off on one replica is never also claimed through the " +
        "other: 300 jobs enqueued through both while runners wait on both, each " +
        "leased exactly once",
      async () => {
        const a = await startTestControlPlane({ metricsListen: loopback });
        const b = await startTestControlPlane({
          metricsListen: loopback,
          pki: a.pki,
          database: a.database,
        });
        const admins = [await adminActor(a), await adminActor(b, b.url)];
        const ws = "handoff-replicas";
        const runners: Array<{ runner: RunnerActor; home: "A" | "B" }> = [];
        for (let i = 0; i < 8; i++) {
          const home = i % 2 ? "B" : "A";
          const plane = home === "A" ? a : b;
          // Registered through its home replica, on a connection to it.
          const runner = await registeredRunner(
            { ...a, url: plane.url, plane: plane.plane },
            `r${i}`,
            ws,
          );
          runners.push({ runner, home });
        }
        const total = 300;
        const completed = new Map<string, string>();
        const problems: string[] = [];
        let stop = false;
        const deadline = Date.now() + 90_000;
        const work = async ({ runner }: { runner: RunnerActor }) => {
          while (!stop && completed.size < total && Date.now() < deadline) {
            const claim: RestReply = await runner.claim({ waitSeconds: 2 });
            if (claim.status === 204) continue;
            if (claim.status !== 200) {
              problems.push(`claim by ${runner.runnerId}: ${claim.status} ${claim.text}`);
              return;
            }
            const jobId: string = claim.json.job.id;
            if (completed.has(jobId))
              problems.push(
                `job ${jobId} leased again to ${runner.runnerId} after ${completed.get(jobId)} completed it`,
              );
            const done = await runner.complete(jobId, claim.json.token);
            if (done.status !== 200)
              problems.push(`complete ${jobId} by ${runner.runnerId}: ${done.status} ${done.text}`);
            completed.set(jobId, runner.runnerId);
          }
        };
        const replies: Array<{ via: "A" | "B"; job: Record<string, unknown> }> = [];
        const enqueue = async () => {
          for (let n = 0; n < total && !stop; n++) {
            const via = n % 2 ? "B" : "A";
            const reply = await admins[n % 2]!.enqueue({ workspaceId: ws });
            if (reply.status !== 200)
              problems.push(`enqueue ${n} via ${via}: ${reply.status} ${reply.text}`);
            else replies.push({ via, job: reply.json.job });
            // A little apart, so runners are back to waiting for most enqueues.
            if (n % 4 === 3) await new Promise((resolve) => setTimeout(resolve, 5));
          }
        };
        try {
          await Promise.all([enqueue(), ...runners.map(work)]);
          stop = true;
          expect(problems).toEqual([]);
          expect(completed.size).toBe(total);
          const ids = replies.map((r) => r.job.id as string);
          const { rows } = await sql<{ job_id: string; n: string; runners: string[] }>`
        select job_id, count(*) as n, array_agg(runner_id) as runners from leases where job_id =
          any(${ids}) group by job_id`.execute(a.plane.store.db);
          expect(rows.length).toBe(total);
          expect(rows.filter((r) => Number(r.n) !== 1)).toEqual([]);
          const leasedTo = new Map(rows.map((r) => [r.job_id, r.runners[0]!]));
          const handed = replies.filter((r) => r.job.state === "running");
          // Handed off: leased to a runner waiting on the replica that took the enqueue, and to no
          // one else.
          for (const { via, job } of handed) {
            expect(leasedTo.get(job.id as string)).toBe(job.runnerId);
            expect(runners.find((r) => r.runner.runnerId === job.runnerId)?.home).toBe(via);
          }
          expect(handed.filter((r) => r.via === "A").length).toBeGreaterThan(0);
          expect(handed.filter((r) => r.via === "B").length).toBeGreaterThan(0);
          const counted =
            (await scrape(a.plane.metrics!.url)).value("forelead_leases_handed_off_total") +
            (await scrape(b.plane.metrics!.url)).value("forelead_leases_handed_off_total");
          // Each enqueue reply that says running was handed its own job; a handoff may also lease an
          // older job.
          expect(counted).toBeGreaterThanOrEqual(handed.length);
          const { rows: states } = await sql<{ state: string; attempts: number; n: string }>`
        select state, attempts, count(*) as n from jobs where id = any(${ids}) group by state, attempts`.execute(
            a.plane.store.db,
          );
          expect(states.map((s) => ({ ...s, n: Number(s.n) }))).toEqual([
            { state: "succeeded", attempts: 1, n: total },
          ]);
        } finally {
          stop = true;
          await Promise.all(runners.map((r) => r.runner.close()));
          await Promise.all(admins.map((x) => x.close()));
          await b.close();
          await a.close();
        }
      },
      120_000,
    );
  },
);
