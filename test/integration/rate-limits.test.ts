import "reflect-metadata";
import { sql } from "kysely";
import { describe, expect, it } from "vitest";
import { registeredRunner, type RunnerActor } from "../support/actors.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";
import { ensureRateLimits } from "../../src/broker/jobs/rate-limits.js";

// Rate limits (issue 49): at most N jobs naming a limit start per window, across replicas; the rule
// is forelead_claim's (forelead_rate_limit_room), shared with the waiting explanation. Per-minute
// limits here, so no assertion depends on how fast the test runs.
const cp = useControlPlane({ rateLimits: [{ name: "preset", perMinute: 2 }] });
const { admin } = cp;

function setLimit(name: string, body: Record<string, unknown>) {
  return admin.rest.request("PUT", `/v1/admin/rate-limits/${encodeURIComponent(name)}`, {
    apiVersion: "v1",
    ...body,
  });
}

/** Claims until nothing is left to claim, completing each job; returns the started ids. */
async function drain(runner: RunnerActor): Promise<string[]> {
  const ids: string[] = [];
  for (;;) {
    const claim = await runner.claim({ waitSeconds: 0 });
    if (claim.status === 204) return ids;
    expect(claim.status, claim.text).toBe(200);
    ids.push(claim.json.job.id);
    const done = await runner.complete(claim.json.job.id, claim.json.token);
    expect(done.status, done.text).toBe(200);
  }
}

describe(`rate limits (${databaseKind})`, () => {
  it("at most the limit's jobs start per window, a held job says until when, and a raise takes effect", async () => {
    const ws = "rate-one";
    const set = await setLimit("api", { perMinute: 3 });
    expect(set.status, set.text).toBe(200);
    expect(set.json.rateLimit).toMatchObject({ name: "api", perMinute: 3 });
    const runner = await registeredRunner(cp, "rate-one-1", ws);
    const limited: string[] = [];
    for (let i = 0; i < 5; i++) {
      const reply = await admin.enqueue({ workspaceId: ws, rateLimit: "api" });
      expect(reply.status, reply.text).toBe(200);
      expect(reply.json.job.rateLimit).toBe("api");
      limited.push(reply.json.job.id);
    }
    // A job without a limit, enqueued last, is not held behind the limited ones.
    const free = await admin.enqueue({ workspaceId: ws });
    expect(free.status, free.text).toBe(200);
    expect(await drain(runner)).toEqual([...limited.slice(0, 3), free.json.job.id]);
    const held = await admin.job(limited[3]!);
    expect(held.json.job.waiting).toMatchObject({ code: "rate_limited", rateLimit: "api" });
    expect(held.json.job.waiting.message).toContain("at most 3 of its jobs start per minute");
    // It may start a minute after the first of the three started (the database's lease times).
    const { rows } = await sql<{ issued_at: Date }>`select l.issued_at from leases l
      where l.job_id = ${limited[0]} order by l.id limit 1`.execute(cp.plane.store.db);
    const first = new Date(rows[0]!.issued_at).getTime();
    expect(Date.parse(held.json.job.waiting.until)).toBe(first + 60_000);
    const listed = await admin.rest.request("GET", "/v1/admin/rate-limits");
    expect(listed.status, listed.text).toBe(200);
    expect(listed.json.rateLimits).toContainEqual(
      expect.objectContaining({ name: "api", perMinute: 3, queued: 2 }),
    );
    // Raised at run time: the next claims start the rest, no restart.
    expect((await setLimit("api", { perMinute: 5 })).status).toBe(200);
    expect(await drain(runner)).toEqual(limited.slice(3));
    await runner.close();
  });

  it("a pipeline step's job carries its rate limit", async () => {
    const reply = await admin.rest.request("POST", "/v1/admin/pipelines", {
      apiVersion: "v1",
      workspaceId: "rate-steps",
      name: "p",
      steps: [
        {
          name: "build",
          labels: ["linux"],
          spec: { image: "busybox", argv: ["true"] },
          rateLimit: "preset",
        },
      ],
    });
    expect(reply.status, reply.text).toBe(200);
    const jobId = reply.json.pipeline.steps[0].jobId as string;
    expect((await admin.job(jobId)).json.job.rateLimit).toBe("preset");
  });

  it("serve --rate-limit creates a limit only when it is not stored yet", async () => {
    const listed = await admin.rest.request("GET", "/v1/admin/rate-limits");
    expect(listed.json.rateLimits).toContainEqual(
      expect.objectContaining({ name: "preset", perMinute: 2 }),
    );
    expect((await setLimit("preset", { perSecond: 7 })).status).toBe(200);
    // What a restart with the flags does: the stored limit stays as set, a new one is created.
    const created = await ensureRateLimits(cp.plane.store.db, [
      { name: "preset", perMinute: 2 },
      { name: "fresh", perSecond: 4 },
    ]);
    expect(created).toEqual(["fresh"]);
    const after = await admin.rest.request("GET", "/v1/admin/rate-limits");
    const byName = Object.fromEntries(
      (after.json.rateLimits as Array<{ name: string }>).map((l) => [l.name, l]),
    );
    expect(byName.preset).toMatchObject({ perSecond: 7 });
    expect(byName.fresh).toMatchObject({ perSecond: 4 });
  });

  it("bad input is refused with 400 naming it, and nothing is stored", async () => {
    const ws = "rate-bad";
    const count = async () =>
      (
        await sql<{ n: number }>`select
          (select count(*) from rate_limits where name like 'bad%')
          + (select count(*) from jobs where workspace_id = ${ws}) as n`.execute(cp.plane.store.db)
      ).rows[0]!.n;
    for (const body of [{}, { perSecond: 1, perMinute: 1 }, { perSecond: -1 }]) {
      const reply = await setLimit("bad1", body);
      expect(reply.status, reply.text).toBe(400);
      expect(reply.json.message).toContain("exactly one of perSecond or perMinute");
    }
    const over = await setLimit("bad2", { perMinute: 10_001 });
    expect(over.status, over.text).toBe(400);
    expect(over.json.message).toContain("from 1 to 10000");
    const badName = await setLimit("bad name", { perSecond: 1 });
    expect(badName.status, badName.text).toBe(400);
    expect(badName.json.message).toMatch(/^name "bad name" is not a valid id/);
    const unknown = await admin.enqueue({ workspaceId: ws, rateLimit: "bad-unknown" });
    expect(unknown.status, unknown.text).toBe(400);
    expect(unknown.json.message).toContain('rateLimit "bad-unknown" is not a rate limit');
    const batch = await admin.rest.request("POST", "/v1/admin/jobs:batch", {
      apiVersion: "v1",
      jobs: [
        { workspaceId: ws, labels: ["linux"], spec: { image: "busybox", argv: ["true"] } },
        {
          workspaceId: ws,
          labels: ["linux"],
          spec: { image: "busybox", argv: ["true"] },
          rateLimit: "bad-unknown",
        },
      ],
    });
    expect(batch.status, batch.text).toBe(400);
    const badRef = await admin.enqueue({ workspaceId: ws, rateLimit: "a b" });
    expect(badRef.status, badRef.text).toBe(400);
    expect(badRef.json.message).toMatch(/^rateLimit "a b" is not a valid id/);
    expect(Number(await count())).toBe(0);
  });
});
