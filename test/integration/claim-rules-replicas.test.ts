import "reflect-metadata";
import { sql } from "kysely";
import { describe, expect, it } from "vitest";
import { adminActor, registeredRunner, runnerActor, type RunnerActor } from "../support/actors.js";
import { databaseKind } from "../support/database.js";
import { useReplicaPair } from "../support/fixture.js";

// Concurrency groups and requirements are enforced by the claim statement, so they hold across
// control-plane replicas on one Postgres (two processes cannot share an embedded database).
describe.runIf(databaseKind === "postgres")("claim rules across two replicas", () => {
  const replicas = useReplicaPair();

  it(
    "a concurrency group of limit 2 never has a third running, with 6 " +
      "runners claiming through both replicas",
    async () => {
      const { a, b } = replicas;
      const ws = "grp";
      const admins = [await adminActor(a), await adminActor(b, b.url)];
      const grouped: string[] = [];
      const others: string[] = [];
      for (let i = 0; i < 24; i++) {
        const withKey = i % 4 !== 3;
        const reply = await admins[i % 2]!.enqueue({
          workspaceId: ws,
          ...(withKey ? { concurrencyKey: "deploy", concurrencyLimit: 2 } : {}),
        });
        expect(reply.status, reply.text).toBe(200);
        (withKey ? grouped : others).push(reply.json.job.id);
      }
      const runners: Array<{ home: RunnerActor; away: RunnerActor }> = [];
      for (let i = 0; i < 6; i++) {
        const [home, away] = i % 2 === 0 ? [a, b] : [b, a];
        const registered = await registeredRunner(home, `g${i}`, ws, { slots: 2 });
        runners.push({
          home: await runnerActor(home, `g${i}`, ws, home.url),
          away: await runnerActor(home, `g${i}`, ws, away.url),
        });
        await registered.close();
      }
      const runningInGroup = async () =>
        (
          await a.plane.store.db
            .selectFrom("jobs")
            .select(sql<number>`count(*)::int`.as("n"))
            .where("workspace_id", "=", ws)
            .where("concurrency_key", "=", "deploy")
            .where("state", "=", "running")
            .executeTakeFirstOrThrow()
        ).n;
      const total = grouped.length + others.length;
      const completed = new Set<string>();
      const errors: string[] = [];
      let maxSeen = 0;
      let done = false;
      // A sampler beside the workload: every committed snapshot it reads has at most 2 running.
      const sampler = (async () => {
        while (!done) maxSeen = Math.max(maxSeen, await runningInGroup());
      })();
      const loop = async (r: { home: RunnerActor; away: RunnerActor }, n: number) => {
        for (let k = 0; completed.size < total && errors.length === 0 && k < 200; k++) {
          const claim = await r.home.claim({ waitSeconds: 2 });
          if (claim.status === 204) continue;
          if (claim.status !== 200) {
            errors.push(`claim: ${claim.status} ${claim.text}`);
            return;
          }
          maxSeen = Math.max(maxSeen, await runningInGroup());
          const via = (n + k) % 2 ? r.away : r.home;
          const end = await via.complete(claim.json.job.id, claim.json.token, {
            completionId: `c-${claim.json.job.id}`,
          });
          if (end.status !== 200) errors.push(`complete: ${end.status} ${end.text}`);
          else completed.add(claim.json.job.id);
        }
      };
      await Promise.all(runners.flatMap((r) => [loop(r, 0), loop(r, 1), loop(r, 2)]));
      done = true;
      await sampler;
      console.log(
        `claim-rules replicas: ${total} jobs (${grouped.length} in the group) ` +
          `through 2 replicas by 6 runners; most group jobs seen running at once: ` +
          `${maxSeen}`,
      );
      expect(errors).toEqual([]);
      expect(completed.size).toBe(total);
      expect(maxSeen).toBeLessThanOrEqual(2);
      // Each job was leased exactly once (no retries here).
      const leases = await a.plane.store.db
        .selectFrom("leases")
        .select(["job_id", sql<number>`count(*)::int`.as("n")])
        .where("workspace_id", "=", ws)
        .groupBy("job_id")
        .execute();
      expect(leases.length).toBe(total);
      expect(leases.filter((l) => l.n !== 1)).toEqual([]);
      await Promise.all([
        ...admins.map((x) => x.close()),
        ...runners.flatMap((r) => [r.home.close(), r.away.close()]),
      ]);
    },
  );

  it(
    "requirements: an arm64 job is never leased to the amd64 runners " +
      "claiming on both replicas, and is to an arm64 runner",
    async () => {
      const { a, b } = replicas;
      const ws = "arch";
      const admin = await adminActor(a);
      const amd = [
        await registeredRunner(a, "amd-a", ws, { architecture: "amd64" }),
        await registeredRunner(a, "amd-b", ws, { architecture: "amd64" }),
      ];
      const amdOnB = await runnerActor(a, "amd-b", ws, b.url);
      const armJob = await admin.enqueue({
        workspaceId: ws,
        requirements: { architecture: "arm64" },
      });
      expect(armJob.status, armJob.text).toBe(200);
      expect(armJob.json.job.waiting).toMatchObject({
        code: "unmet_requirements",
        unmetRequirement: "architecture arm64",
        message: expect.stringContaining("no runner with architecture arm64"),
      });
      const plain: string[] = [];
      for (let i = 0; i < 6; i++)
        plain.push((await admin.enqueue({ workspaceId: ws })).json.job.id);
      // Both amd64 runners claim (one through each replica) until nothing is left for them.
      const taken: string[] = [];
      await Promise.all(
        [amd[0]!, amdOnB].map(async (r) => {
          for (;;) {
            const claim = await r.claim({ waitSeconds: 1 });
            if (claim.status === 204) return;
            expect(claim.status, claim.text).toBe(200);
            taken.push(claim.json.job.id);
            expect((await r.complete(claim.json.job.id, claim.json.token)).status).toBe(200);
          }
        }),
      );
      expect(taken.sort()).toEqual([...plain].sort());
      expect((await admin.job(armJob.json.job.id)).json.job.state).toBe("queued");
      const armOnB = await runnerActor(a, "arm-b", ws, b.url);
      expect((await armOnB.register({ architecture: "arm64" })).status).toBe(200);
      const claim = await armOnB.claim({ waitSeconds: 0 });
      expect(claim.status, claim.text).toBe(200);
      expect(claim.json.job.id).toBe(armJob.json.job.id);
      await Promise.all([
        admin.close(),
        ...amd.map((r) => r.close()),
        amdOnB.close(),
        armOnB.close(),
      ]);
    },
  );
});
