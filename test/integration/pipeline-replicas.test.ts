// Pipelines across replicas: PIPELINES (default 200) pipelines of 5 steps
// (A; B and C need A; D needs B and C; E needs D) are submitted through two
// control planes on one Postgres while 20 runners, half on each replica,
// claim and complete their jobs (every third completion through the other
// replica). Every step must run exactly once, never before its needs, and
// every pipeline must settle. Postgres only: replicas share one database.
import { describe, expect, it } from "vitest";
import { sql } from "kysely";
import { runnerActor, type RunnerActor } from "../support/actors.js";
import { createRestClient } from "../support/clients.js";
import { databaseKind } from "../support/database.js";
import { useReplicaPair } from "../support/fixture.js";

const pipelines = Number(process.env.PIPELINES ?? 200);
const runnerCount = 20;
const submitInFlight = 8;
/** The workload stops by itself after this long, whatever happened. */
const deadlineMs = 240_000;
const ws = "prw";

const pair = useReplicaPair();
const job = { labels: ["linux"], spec: { image: "busybox", argv: ["true"], timeoutSeconds: 600 } };
const steps = [
  { name: "A", needs: [] },
  { name: "B", needs: ["A"] },
  { name: "C", needs: ["A"] },
  { name: "D", needs: ["B", "C"] },
  { name: "E", needs: ["D"] },
].map((s) => ({ ...s, ...job }));

describe.skipIf(databaseKind !== "postgres")("pipelines across two replicas (postgres)", () => {
  it(
    `${pipelines} pipelines × 5 steps, 20 runners: every step runs once, ` +
      `never before its needs, every pipeline settles`,
    async () => {
      const planes = [pair.a, pair.b];
      const admins = await Promise.all(
        planes.map(async (cp) =>
          createRestClient(cp.url, cp.pki.ca.certPem, await cp.pki.service("test-admin")),
        ),
      );
      const runners: RunnerActor[][] = [[], []];
      for (let i = 0; i < runnerCount; i++) {
        const side = i % 2;
        const r = await runnerActor(planes[side]!, `r${i}`, ws, planes[side]!.url);
        const reg = await r.register({ slots: 4 });
        expect(reg.status, reg.text).toBe(200);
        runners[side]!.push(r);
      }
      // The same runner identity on the other replica, for cross completions.
      const crossOf = new Map<string, RunnerActor>();
      for (let i = 0; i < runnerCount; i++)
        crossOf.set(
          `r${i}`,
          await runnerActor(planes[1 - (i % 2)]!, `r${i}`, ws, planes[1 - (i % 2)]!.url),
        );
      const stopAt = Date.now() + deadlineMs;
      let submitted = 0;
      let completions = 0;
      const errors: string[] = [];
      const claimed = new Map<string, number>();
      const submitOne = async (i: number) => {
        const reply = await admins[i % 2]!.request("POST", "/v1/admin/pipelines", {
          apiVersion: "v1",
          workspaceId: ws,
          name: `p${i}`,
          idempotencyKey: `p${i}`,
          steps,
        });
        if (reply.status !== 200) errors.push(`submit ${i}: ${reply.status} ${reply.text}`);
      };
      const submitter = async () => {
        while (submitted < pipelines && !errors.length) await submitOne(submitted++);
      };
      const settled = async () => {
        const [row] = (
          await sql<{
            n: string;
          }>`select count(*) as n from pipelines where settled_at is not null`.execute(
            pair.a.plane.store.db,
          )
        ).rows;
        return Number(row!.n);
      };
      let allSettled = false;
      const loop = async (r: RunnerActor) => {
        while (!allSettled && Date.now() < stopAt && errors.length < 5) {
          const claim = await r.claim({ waitSeconds: 1 });
          if (claim.status === 204) continue;
          if (claim.status !== 200) {
            errors.push(`claim ${r.runnerId}: ${claim.status} ${claim.text}`);
            continue;
          }
          const jobId = claim.json.job.id as string;
          claimed.set(jobId, (claimed.get(jobId) ?? 0) + 1);
          const via = ++completions % 3 === 0 ? crossOf.get(r.runnerId)! : r;
          const done = await via.complete(jobId, claim.json.token);
          if (done.status !== 200) errors.push(`complete ${jobId}: ${done.status} ${done.text}`);
        }
      };
      const watcher = async () => {
        while (Date.now() < stopAt && errors.length < 5 && !allSettled) {
          allSettled = submitted >= pipelines && (await settled()) >= pipelines;
          if (!allSettled) await new Promise((r) => setTimeout(r, 250));
        }
        allSettled = true;
      };
      await Promise.all([
        ...Array.from({ length: submitInFlight }, submitter),
        ...runners.flat().flatMap((r) => [loop(r), loop(r)]),
        watcher(),
      ]);
      expect(errors).toEqual([]);
      const db = pair.a.plane.store.db;
      const states = (
        await sql<{
          state: string;
          n: string;
        }>`select state, count(*) as n from pipelines group by state`.execute(db)
      ).rows;
      expect(Object.fromEntries(states.map((s) => [s.state, Number(s.n)]))).toEqual({
        succeeded: pipelines,
      });
      // Exactly once: one job per step, each leased once, each claimed once by the runners.
      const stepRows = (
        await sql<{
          attempts: number;
          job_state: string;
        }>`select s.attempts, j.state as job_state from pipeline_steps s join jobs j on j.id = s.job_id`.execute(
          db,
        )
      ).rows;
      expect(stepRows.length).toBe(pipelines * 5);
      expect(stepRows.every((s) => s.attempts === 1 && s.job_state === "succeeded")).toBe(true);
      const [jobs] = (
        await sql<{ n: string }>`select count(*) as n from jobs where workspace_id = ${ws}`.execute(
          db,
        )
      ).rows;
      expect(Number(jobs!.n)).toBe(pipelines * 5);
      const [twice] = (
        await sql<{
          n: string;
        }>`select count(*) as n from (select job_id from leases where workspace_id = ${ws} group by
          job_id having count(*) > 1) x`.execute(db)
      ).rows;
      expect(Number(twice!.n)).toBe(0);
      expect(claimed.size).toBe(pipelines * 5);
      expect([...claimed.values()].every((n) => n === 1)).toBe(true);
      // Never before its needs: a step's lease was issued after every step it needs had settled.
      const [early] = (
        await sql<{ n: string }>`
      select count(*) as n
      from pipeline_steps s
      join leases l on l.job_id = s.job_id
      cross join lateral unnest(s.needs) as need(name)
      join pipeline_steps n on n.pipeline_id = s.pipeline_id and n.name = need.name
      join jobs nj on nj.id = n.job_id
      where nj.settled_at is null or l.issued_at < nj.settled_at`.execute(db)
      ).rows;
      expect(Number(early!.n)).toBe(0);
      for (const r of [...runners.flat(), ...crossOf.values()]) await r.close();
      for (const a of admins) await a.close();
    },
    deadlineMs + 60_000,
  );
});
