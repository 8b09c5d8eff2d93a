// The batch enqueue (POST /v1/admin/jobs:batch, docs/admin.md): 1..1,000 jobs
// in one transaction, all or nothing, each by the single enqueue's rules.
import { describe, expect, it } from "vitest";
import { sql } from "kysely";
import { parseRoleGrant } from "../../src/identity/roles.js";
import { jobBody, registeredRunner } from "../support/actors.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane, useServiceClients } from "../support/fixture.js";

const id = (name: string) => `spiffe://forelead/services/${name}`;
// Leases outlast the 1,000 claims of the first test on a busy machine, so none expires and is
// claimed again.
const cp = useControlPlane({
  grants: [parseRoleGrant(`${id("ci")}=enqueue:w1`)],
  leaseSeconds: 600,
});
const { admin } = cp;
const service = useServiceClients(cp);
const batch = (jobs: Record<string, unknown>[]) =>
  admin.rest.request("POST", "/v1/admin/jobs:batch", { apiVersion: "v1", jobs });
const countIn = async (ws: string) =>
  (
    await sql<{
      n: number;
    }>`select count(*)::int as n from jobs where workspace_id = ${ws}`.execute(cp.plane.store.db)
  ).rows[0]!.n;

describe(`batch enqueue (${databaseKind})`, () => {
  it("1,000 jobs in one call are stored in order and all claimable, highest priority first", async () => {
    const ws = "batch-big";
    const runner = await registeredRunner(cp, "r-big", ws, { slots: 1000 });
    const jobs = Array.from({ length: 1000 }, (_, i) =>
      jobBody({
        workspaceId: ws,
        priority: (i * 7919) % 1000,
        spec: { image: "busybox", argv: ["echo", String(i)], timeoutSeconds: 60 },
      }),
    );
    const reply = await batch(jobs);
    expect(reply.status, reply.text.slice(0, 500)).toBe(200);
    expect(reply.json.created).toBe(1000);
    expect(reply.json.jobs).toHaveLength(1000);
    expect(reply.json.jobs.map((j: { spec: { argv: string[] } }) => j.spec.argv[1])).toEqual(
      jobs.map((_, i) => String(i)),
    );
    const claimed: number[] = [];
    for (;;) {
      const claim = await runner.claim({ waitSeconds: 0 });
      if (claim.status === 204) break;
      expect(claim.status, claim.text).toBe(200);
      claimed.push((claim.json.job.priority as number | undefined) ?? 0);
    }
    expect(claimed).toHaveLength(1000);
    expect(claimed).toEqual([...claimed].sort((a, b) => b - a));
    // One job.queued event per job, written by the batch's one statement.
    const events = await sql<{
      n: number;
    }>`select count(*)::int as n from events where type = 'job.queued' and workspace_id = ${ws}`.execute(
      cp.plane.store.db,
    );
    expect(events.rows[0]!.n).toBe(1000);
  }, 300_000); // a bound, not a figure: 1,000 claims one after another on a busy machine

  it(
    "a repeated batch returns the same jobs; a key reused within one batch " +
      "is refused by index and nothing is stored",
    async () => {
      const ws = "batch-keys";
      const jobs = [0, 1, 2].map((i) => jobBody({ workspaceId: ws, idempotencyKey: `k-${i}` }));
      const first = await batch(jobs);
      expect(first.status, first.text).toBe(200);
      expect(first.json.created).toBe(3);
      const again = await batch([...jobs, jobBody({ workspaceId: ws, idempotencyKey: "k-3" })]);
      expect(again.status, again.text).toBe(200);
      expect(again.json.created).toBe(1);
      expect(again.json.jobs.slice(0, 3).map((j: { id: string }) => j.id)).toEqual(
        first.json.jobs.map((j: { id: string }) => j.id),
      );
      // The single enqueue honours a key a batch used, and the other way round.
      const single = await admin.enqueue({ workspaceId: ws, idempotencyKey: "k-1" });
      expect(single.json.job.id).toBe(first.json.jobs[1].id);
      const reused = await batch([
        jobBody({ workspaceId: ws, idempotencyKey: "k-9" }),
        jobBody({ workspaceId: ws }),
        jobBody({ workspaceId: ws, idempotencyKey: "k-9" }),
      ]);
      expect(reused.status).toBe(400);
      expect(reused.json.message).toBe(
        `1 of 3 jobs refused, so nothing was stored: jobs[2]: idempotencyKey ` +
          `"k-9" repeats jobs[0]'s in workspace "${ws}"; give each job of a batch ` +
          `its own key`,
      );
      // A key already used for another request: 409 by index, and the new jobs of the batch are
      // rolled back.
      const changed = await batch([
        jobBody({ workspaceId: ws, idempotencyKey: "k-new" }),
        jobBody({ workspaceId: ws, idempotencyKey: "k-0", priority: 5 }),
      ]);
      expect(changed.status).toBe(409);
      expect(changed.json.message).toBe(
        `1 of 2 jobs refused, so nothing was stored: jobs[1]: idempotencyKey ` +
          `"k-0" was already used in workspace "${ws}" for job ` +
          `${first.json.jobs[0].id} with a different request; use a new key`,
      );
      expect(await countIn(ws)).toBe(4);
    },
  );

  it("bad jobs are reported by index with why, every one of them, and nothing is stored", async () => {
    const ws = "batch-bad";
    const jobs = Array.from({ length: 10 }, () => jobBody({ workspaceId: ws }));
    jobs[3] = jobBody({ workspaceId: ws, spec: { image: "busybox", argv: [] } });
    jobs[7] = jobBody({ workspaceId: ws, priority: 2_000_000 });
    const reply = await batch(jobs);
    expect(reply.status).toBe(400);
    expect(reply.json.code).toBe("invalid_argument");
    expect(reply.json.message).toBe(
      `2 of 10 jobs refused, so nothing was stored: jobs[3]: spec.argv is ` +
        `required: the command as an array, e.g. ["sh", "-c", "make test"]; ` +
        `jobs[7]: priority must be between -1000000 and 1000000; got 2000000`,
    );
    expect(await countIn(ws)).toBe(0);
    const text = await batch([
      jobBody({ workspaceId: ws }),
      jobBody({ workspaceId: ws, labels: ["a\u0000b"] }),
    ]);
    expect(text.status).toBe(400);
    expect(text.json.message).toContain(`field "jobs[1].labels[0]"`);
    const version = await batch([jobBody({ workspaceId: ws, apiVersion: "v2" })]);
    expect(version.status).toBe(400);
    expect(version.json.message).toMatch(/^jobs\[0\]: apiVersion "v2" is not supported/);
    expect(await countIn(ws)).toBe(0);
  });

  it(
    "every job's workspace is checked: an enqueuer of w1 may batch into w1, " +
      "and a batch touching w2 is refused naming its jobs",
    async () => {
      const ci = await service("ci");
      const ok = await ci.request("POST", "/v1/admin/jobs:batch", {
        apiVersion: "v1",
        jobs: [jobBody({ workspaceId: "w1" }), jobBody({ workspaceId: "w1" })],
      });
      expect(ok.status, ok.text).toBe(200);
      const before = await countIn("w2");
      const refused = await ci.request("POST", "/v1/admin/jobs:batch", {
        apiVersion: "v1",
        jobs: [
          jobBody({ workspaceId: "w1" }),
          jobBody({ workspaceId: "w2" }),
          jobBody({ workspaceId: "w1" }),
          jobBody({ workspaceId: "w2" }),
        ],
      });
      expect(refused.status).toBe(403);
      expect(refused.json.message).toBe(
        `${id("ci")} may enqueue only in workspaces "w1", not in workspace "w2" ` +
          `(jobs[1], jobs[3]); grant it with --grant ${id("ci")}=enqueue:w2`,
      );
      expect(await countIn("w2")).toBe(before);
      const audit = await admin.rest.request("GET", "/v1/admin/audit?pageSize=500");
      const records = audit.json.records as {
        action?: string;
        target?: string;
        reason?: string;
        decision: string;
      }[];
      expect(
        records.some(
          (r) =>
            r.action === "job.enqueue_batch" &&
            r.target === `2 jobs in workspace "w1"` &&
            r.decision === "allow" &&
            r.reason?.startsWith("2 of 2 jobs queued"),
        ),
      ).toBe(true);
    },
  );

  it(
    "bounds: no jobs is 400, 1,001 jobs is 413 naming the limit, a body over " +
      "the byte bound is 413 naming it",
    async () => {
      const none = await batch([]);
      expect(none.status).toBe(400);
      expect(none.json.message).toBe("jobs is empty; a batch holds 1 to 1000 jobs");
      const small = {
        apiVersion: "v1",
        workspaceId: "batch-bounds",
        spec: { image: "i", argv: ["t"] },
      };
      const many = await batch(Array.from({ length: 1001 }, () => small));
      expect(many.status).toBe(413);
      expect(many.json.message).toBe(
        "jobs has 1001 jobs; a batch holds at most 1000: send the rest in another batch",
      );
      const big = await batch(
        Array.from({ length: 1000 }, () =>
          jobBody({
            workspaceId: "batch-bounds",
            spec: { image: "busybox", argv: ["echo", "x".repeat(1100)] },
          }),
        ),
      );
      expect(big.status).toBe(413);
      expect(big.json.message).toMatch(/^the request body is over \d+ bytes/);
      expect(await countIn("batch-bounds")).toBe(0);
    },
  );

  it(
    "secrets are sealed as in the single enqueue, delivered in the lease, " +
      "and never echoed in the reply, event or audit record",
    async () => {
      const ws = "batch-secrets";
      const value = "s3cr3t-batch-value-4711";
      const runner = await registeredRunner(cp, "r-secrets", ws);
      const reply = await batch([
        jobBody({
          workspaceId: ws,
          secrets: { API_TOKEN: value },
          secretFiles: { "key.pem": value },
        }),
      ]);
      expect(reply.status, reply.text).toBe(200);
      expect(reply.text).not.toContain(value);
      expect(reply.json.jobs[0].secretNames).toEqual(["API_TOKEN"]);
      const claim = await runner.claim({ waitSeconds: 0 });
      expect(claim.status, claim.text).toBe(200);
      expect(claim.text).toContain(value);
      const stored = JSON.stringify([
        (await sql`select * from events where workspace_id = ${ws}`.execute(cp.plane.store.db))
          .rows,
        (await sql`select * from audit_records`.execute(cp.plane.store.db)).rows,
        (await sql`select * from jobs where workspace_id = ${ws}`.execute(cp.plane.store.db)).rows,
      ]);
      expect(stored).not.toContain(value);
    },
  );
});
