import "reflect-metadata";
import { setTimeout as sleep } from "node:timers/promises";
import { sql } from "kysely";
import { describe, expect, it } from "vitest";
import {
  adminActor,
  jobBody,
  registeredRunner,
  runnerActor,
  type AdminActor,
  type RunnerActor,
} from "../support/actors.js";
import { databaseKind } from "../support/database.js";
import { useReplicaPair } from "../support/fixture.js";

// A rate limit is taken inside the claim statement (forelead_claim, under the limit's row lock),
// so it holds with claims spread over two replicas on one Postgres, and a change to it is read by
// the next claim on either replica.
describe.runIf(databaseKind === "postgres")("rate limits across two replicas", () => {
  const replicas = useReplicaPair({ rateLimits: [{ name: "burst", perSecond: 10 }] });

  it("10/s with 20 runners on two replicas: no one-second window starts more than 10; raised to 20/s at run time, it takes effect", async () => {
    const { a, b } = replicas;
    const ws = "rate-two";
    const db = a.plane.store.db;
    const admins = [await adminActor(a), await adminActor(b, b.url)];
    const enqueue = async (admin: AdminActor, n: number) => {
      const reply = await admin.rest.request("POST", "/v1/admin/jobs:batch", {
        apiVersion: "v1",
        jobs: Array.from({ length: n }, () => jobBody({ workspaceId: ws, rateLimit: "burst" })),
      });
      expect(reply.status, reply.text).toBe(200);
    };
    const runners: RunnerActor[] = [];
    for (let i = 0; i < 20; i++) {
      const home = i % 2 === 0 ? a : b;
      const registered = await registeredRunner(home, `rate${i}`, ws);
      await registered.close();
      runners.push(await runnerActor(home, `rate${i}`, ws, home.url));
    }
    let started = 0;
    const errors: string[] = [];
    // Every runner claims until `target` jobs started; a claim that gets nothing tries again soon.
    const run = (target: number) =>
      Promise.all(
        runners.map(async (r) => {
          while (started < target && errors.length === 0) {
            const claim = await r.claim({ waitSeconds: 0 });
            if (claim.status === 204) {
              await sleep(20);
              continue;
            }
            if (claim.status !== 200) {
              errors.push(`claim: ${claim.status} ${claim.text}`);
              return;
            }
            started++;
            const end = await r.complete(claim.json.job.id, claim.json.token);
            if (end.status !== 200) errors.push(`complete: ${end.status} ${end.text}`);
          }
        }),
      );
    /** The most leases of the workspace issued within one second of each other, since `from`. */
    const busiestSecond = async (from: Date) =>
      (
        await sql<{ n: number }>`select coalesce(max((select count(*) from leases l2
            where l2.workspace_id = ${ws} and l2.issued_at >= l.issued_at
              and l2.issued_at < l.issued_at + interval '1 second')), 0)::int as n
          from leases l where l.workspace_id = ${ws} and l.issued_at >= ${from}`.execute(db)
      ).rows[0]!.n;
    const t0 = new Date(0);
    await Promise.all([enqueue(admins[0]!, 25), enqueue(admins[1]!, 25)]);
    await run(50);
    expect(errors).toEqual([]);
    const atTen = await busiestSecond(t0);
    // Raised through the other replica while both serve claims.
    const raisedAt = new Date();
    const raise = await admins[1]!.rest.request("PUT", "/v1/admin/rate-limits/burst", {
      apiVersion: "v1",
      perSecond: 20,
    });
    expect(raise.status, raise.text).toBe(200);
    await Promise.all([enqueue(admins[0]!, 30), enqueue(admins[1]!, 30)]);
    await run(110);
    expect(errors).toEqual([]);
    const atTwenty = await busiestSecond(raisedAt);
    console.log(
      `rate limit on two replicas, 20 runners: busiest second ${atTen} at 10/s, ` +
        `${atTwenty} after raising to 20/s`,
    );
    expect(atTen).toBe(10);
    expect(atTwenty).toBeGreaterThan(10);
    expect(atTwenty).toBeLessThanOrEqual(20);
    await Promise.all([...admins, ...runners].map((x) => x.close()));
  }, 180_000);
});
