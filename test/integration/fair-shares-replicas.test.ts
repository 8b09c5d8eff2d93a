import "reflect-metadata";
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

// Fair shares are the claim's order (forelead_fair_tag gives the tags under the key's row lock), so
// they hold with enqueues and claims spread over two replicas on one Postgres.
describe.runIf(databaseKind === "postgres")("fair shares across two replicas", () => {
  const replicas = useReplicaPair();

  it("weights 3:1 hold over 400 starts with both keys enqueued and claimed through both replicas", async () => {
    const { a, b } = replicas;
    const ws = "fair-two";
    const admins = [await adminActor(a), await adminActor(b, b.url)];
    const set = await admins[1]!.rest.request("PUT", "/v1/admin/fairness-keys/heavy", {
      apiVersion: "v1",
      workspaceId: ws,
      weight: 3,
    });
    expect(set.status, set.text).toBe(200);
    const batch = (admin: AdminActor, key: string) =>
      admin.rest.request("POST", "/v1/admin/jobs:batch", {
        apiVersion: "v1",
        jobs: Array.from({ length: 150 }, () => jobBody({ workspaceId: ws, fairnessKey: key })),
      });
    // Both keys through both replicas at once: 600 jobs of each.
    const replies = await Promise.all(
      [0, 1].flatMap((round) =>
        ["heavy", "light"].flatMap((key, k) => [
          batch(admins[(round + k) % 2]!, key),
          batch(admins[(round + k + 1) % 2]!, key),
        ]),
      ),
    );
    for (const r of replies) expect(r.status, r.text).toBe(200);
    const runners: RunnerActor[] = [];
    for (let i = 0; i < 4; i++) {
      const home = i % 2 === 0 ? a : b;
      const registered = await registeredRunner(home, `fair${i}`, ws);
      await registered.close();
      runners.push(await runnerActor(home, `fair${i}`, ws, home.url));
    }
    let started = 0;
    const errors: string[] = [];
    const loop = async (r: RunnerActor) => {
      while (started < 400 && errors.length === 0) {
        const claim = await r.claim({ waitSeconds: 0 });
        if (claim.status !== 200) {
          errors.push(`claim: ${claim.status} ${claim.text}`);
          return;
        }
        started++;
        const end = await r.complete(claim.json.job.id, claim.json.token);
        if (end.status !== 200) errors.push(`complete: ${end.status} ${end.text}`);
      }
    };
    await Promise.all(runners.map(loop));
    expect(errors).toEqual([]);
    // The first 400 leases, in the order they were issued.
    const { rows } = await sql<{ key: string; n: number }>`select j.fairness_key as key,
        count(*)::int as n
      from (select job_id from leases where workspace_id = ${ws} order by id limit 400) l
      join jobs j on j.id = l.job_id group by j.fairness_key`.execute(a.plane.store.db);
    const n = Object.fromEntries(rows.map((r) => [r.key, r.n]));
    console.log(`fair shares on two replicas: first 400 starts ${JSON.stringify(n)}`);
    expect(n.heavy! + n.light!).toBe(400);
    expect(Math.abs(n.heavy! / n.light! - 3) / 3).toBeLessThanOrEqual(0.05);
    await Promise.all([...admins, ...runners].map((x) => x.close()));
  }, 180_000);
});
