import "reflect-metadata";
import { randomUUID } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { sql } from "kysely";
import { describe, expect, it } from "vitest";
import { createRetention, type Retention } from "../../src/ops/retention.js";
import type { Retentions } from "../../src/ops/retention-kinds.js";
import { eventually, leasedJob } from "../support/actors.js";
import { useControlPlane } from "../support/fixture.js";
import { scrape } from "../support/metrics.js";
import { readEntries } from "../support/streams.js";

// The server's own pruner keeps events 1 s and runs often: the metrics and doctor test reads it.
// Every other kind keeps its default there, so the pruners the tests make are the only ones that
// delete what the tests backdate.
const cp = useControlPlane({
  metricsListen: { host: "127.0.0.1", port: 0 },
  retentions: { events: 1000 },
  pruneIntervalMs: 300,
});
const { admin } = cp;
const hour = 3600_000;
const ws = () => `rt-${randomUUID().slice(0, 8)}`;

/** A pruner on the test database with `retentions` (others: defaults) that never runs by itself. */
async function withRetention<T>(
  retentions: Partial<Retentions>,
  body: (r: Retention) => Promise<T>,
): Promise<T> {
  const r = createRetention({ store: cp.plane.store, retentions, pruneIntervalMs: 3600_000 });
  try {
    return await body(r);
  } finally {
    await r.close();
  }
}

/** A job run to success in `workspaceId` with three log lines and two event lines; its id. */
async function settledJobWithLines(workspaceId: string): Promise<string> {
  const job = await leasedJob(cp, admin, `r-${randomUUID().slice(0, 8)}`, workspaceId);
  const logs = await job.runner.rest.ndjson("/v1/runner/logs", [
    job.msg(1, { stream: "stdout", text: "one\n" }),
    job.msg(2, { stream: "stdout", text: "two\n" }),
    job.msg(3, { stream: "stdout", text: "three\n" }),
  ]);
  expect(logs.status, logs.text).toBe(204);
  const events = await job.runner.rest.ndjson("/v1/runner/events", [
    job.msg(1, { type: "note", text: "a" }),
    job.msg(2, { type: "note", text: "b" }),
  ]);
  expect(events.status, events.text).toBe(204);
  const done = await job.runner.complete(job.jobId, job.token);
  expect(done.status, done.text).toBe(200);
  await job.runner.close();
  return job.jobId;
}

/** Moves a job's settling `ms` into the past. */
async function backdate(jobId: string, ms: number) {
  await sql`update jobs set settled_at = settled_at - make_interval(secs => ${ms / 1000})
    where id = ${jobId}`.execute(cp.plane.store.db);
}

/** Rows of `jobId` in each table that hangs off a job. */
async function rowsOf(jobId: string) {
  const { rows } = await sql<Record<string, number | string>>`select
      (select count(*) from jobs where id = ${jobId}) as jobs,
      (select count(*) from leases where job_id = ${jobId}) as leases,
      (select count(*) from stream_cursors c join leases l on l.id = c.lease_id
        where l.job_id = ${jobId}) as cursors,
      (select count(*) from stream_messages where job_id = ${jobId}) as lines,
      (select count(*) from job_peaks where job_id = ${jobId}) as peaks`.execute(cp.plane.store.db);
  return Object.fromEntries(Object.entries(rows[0]!).map(([k, v]) => [k, Number(v)]));
}

describe("retention", () => {
  it(
    "deletes a job settled past its retention with everything hanging off it, and keeps a " +
      "fresh settled job and a running one",
    async () => {
      const w = ws();
      const old = await settledJobWithLines(w);
      const fresh = await settledJobWithLines(w);
      await sql`insert into job_peaks (job_id, peak_cpu_cores, peak_memory_bytes, samples)
        values (${old}, 1, 1, 1)`.execute(cp.plane.store.db);
      const running = await leasedJob(cp, admin, `r-${randomUUID().slice(0, 8)}`, w);
      await sql`update jobs set created_at = now() - interval '3 hours'
        where id = ${running.jobId}`.execute(cp.plane.store.db);
      expect(await rowsOf(old)).toEqual({ jobs: 1, leases: 1, cursors: 2, lines: 5, peaks: 1 });
      await backdate(old, 2 * hour);

      const pruned = await withRetention({ jobs: hour }, (r) => r.pruneAll());
      expect(pruned.jobs).toBeGreaterThanOrEqual(1);

      expect(await rowsOf(old)).toEqual({ jobs: 0, leases: 0, cursors: 0, lines: 0, peaks: 0 });
      expect((await admin.job(old)).status).toBe(404);
      expect((await admin.job(running.jobId)).json.job.state).toBe("running");
      expect((await readEntries(admin, fresh)).map((e) => e.sequence)).toEqual(["1", "2", "3"]);
      await running.runner.close();
    },
  );

  it(
    "keeps a retry chain while its newest job is kept and deletes it whole after; keeps a " +
      "pipeline's jobs until the pipeline itself settled past the retention",
    async () => {
      const db = cp.plane.store.db;
      const w = ws();
      const first = await settledJobWithLines(w);
      const retry = await settledJobWithLines(w);
      await sql`update jobs set retried_by = ${retry} where id = ${first}`.execute(db);
      await sql`update jobs set retry_of = ${first} where id = ${retry}`.execute(db);
      await backdate(first, 3 * hour);

      const step = await settledJobWithLines(w);
      await backdate(step, 3 * hour);
      const pipeline = randomUUID();
      await sql`insert into pipelines (id, workspace_id, name, request_sha256, state)
        values (${pipeline}, ${w}, 'p', 'x', 'running')`.execute(db);
      await sql`insert into pipeline_steps (pipeline_id, name, ord, request, state, job_id)
        values (${pipeline}, 'build', 0, '{}', 'succeeded', ${step})`.execute(db);

      await withRetention({ jobs: hour }, (r) => r.pruneAll());
      expect((await rowsOf(first)).jobs, "the retried job, its retry kept").toBe(1);
      expect((await rowsOf(retry)).jobs).toBe(1);
      expect((await rowsOf(step)).jobs, "a step of a running pipeline").toBe(1);

      await backdate(retry, 2 * hour);
      await sql`update pipelines set state = 'succeeded', settled_at = now() - interval '2 hours'
        where id = ${pipeline}`.execute(db);
      const pruned = await withRetention({ jobs: hour }, (r) => r.pruneAll());
      expect(pruned.jobs).toBeGreaterThanOrEqual(4);
      expect(await rowsOf(first)).toMatchObject({ jobs: 0, lines: 0 });
      expect(await rowsOf(retry)).toMatchObject({ jobs: 0, lines: 0 });
      expect(await rowsOf(step)).toMatchObject({ jobs: 0, lines: 0 });
      const { rows } = await sql<{ n: number | string }>`select count(*) as n from pipeline_steps
        where pipeline_id = ${pipeline}`.execute(db);
      expect(Number(rows[0]!.n)).toBe(0);
    },
  );

  it("deletes each other kind of record past its own retention and keeps the rest", async () => {
    const db = cp.plane.store.db;
    const w = ws();
    const old = sql`now() - interval '2 days'`;
    const audit = [randomUUID(), randomUUID(), randomUUID()];
    await sql`insert into audit_records (at, last_at, route, decision, reason, record_id) values
      (${old}, null, 'old', 'allow', 'ok', ${audit[0]}),
      (${old}, now(), 'repeated until now', 'allow', 'ok', ${audit[1]}),
      (now(), null, 'new', 'allow', 'ok', ${audit[2]})`.execute(db);
    const certs = [`old-${w}`, `new-${w}`];
    await sql`insert into issued_certificates (serial, spiffe_id, workspace_id, runner_id,
        not_before, not_after, issued_via, sha256) values
      (${certs[0]}, 'x', ${w}, 'r', ${old}, now() - interval '1 day', 'enroll', 'x'),
      (${certs[1]}, 'x', ${w}, 'r', now(), now() + interval '1 day', 'enroll', 'x')`.execute(db);
    const grants = [randomUUID(), randomUUID(), randomUUID()];
    await sql`insert into enrollment_grants (id, token_sha256, workspace_id, created_by,
        expires_at, used_at) values
      (${grants[0]}, '\\x00', ${w}, 't', now() + interval '1 day', ${old}),
      (${grants[1]}, '\\x01', ${w}, 't', ${old}, null),
      (${grants[2]}, '\\x02', ${w}, 't', now() + interval '1 day', null)`.execute(db);
    const sessions = [randomUUID(), randomUUID()];
    await sql`insert into person_sessions (id, credential_sha256, person, person_claim, delegate,
        expires_at, ended_at) values
      (${sessions[0]}, '\\x00', 'p', 'c', 'd', now() + interval '1 day', ${old}),
      (${sessions[1]}, '\\x01', 'p', 'c', 'd', now() + interval '1 day', null)`.execute(db);
    const subscription = randomUUID();
    await sql`insert into webhook_subscriptions (id, workspace_id, url, events, secret_sealed,
        created_by) values (${subscription}, ${w}, 'https://x.invalid/', '{job.settled}', '\\x00',
        't')`.execute(db);
    await sql`insert into webhook_deliveries (subscription_id, event_id, event_type, event_at,
        data, status, finished_at, event_snapshot) values
      (${subscription}, 1, 'job.settled', ${old}, '{}', 'delivered', ${old},
        pg_current_snapshot()),
      (${subscription}, 2, 'job.settled', ${old}, '{}', 'pending', null, pg_current_snapshot()),
      (${subscription}, 3, 'job.settled', now(), '{}', 'delivered', now(),
        pg_current_snapshot())`.execute(db);
    const schedule = randomUUID();
    await sql`insert into schedules (id, workspace_id, name, cron, time_zone, template_kind,
        template, missed_runs, overlap, next_run_at) values (${schedule}, ${w}, 's', '* * * * *',
        'UTC', 'job', '{}', 'skip', 'allow', now() + interval '1 day')`.execute(db);
    await sql`insert into schedule_fires (schedule_id, due_at, fired_at, cause, outcome) values
      (${schedule}, now() - interval '3 days', now() - interval '3 days', 'due', 'enqueued'),
      (${schedule}, ${old}, ${old}, 'due', 'enqueued')`.execute(db);
    await sql`insert into runners (workspace_id, runner_id, slots, cpu, memory_bytes,
        architecture, labels, clock_offset_ns, last_seen_at) values
      (${w}, 'gone', 1, 1, 1, 'amd64', '{}', 0, ${old}),
      (${w}, 'here', 1, 1, 1, 'amd64', '{}', 0, now())`.execute(db);
    await sql`insert into inventory_reports (workspace_id, runner_id, reported_at, item_count)
      values (${w}, 'gone', ${old}, 0), (${w}, 'here', now(), 0)`.execute(db);

    const pruned = await withRetention(
      {
        audit: 24 * hour,
        certificates: hour,
        grants: hour,
        sessions: hour,
        webhookDeliveries: hour,
        scheduleFires: hour,
        runners: hour,
      },
      (r) => r.pruneAll(),
    );
    for (const kind of [
      "audit",
      "certificates",
      "grants",
      "sessions",
      "webhookDeliveries",
      "scheduleFires",
      "runners",
    ] as const)
      expect(pruned[kind], kind).toBeGreaterThanOrEqual(1);

    const kept = async (query: ReturnType<typeof sql<{ k: string }>>) =>
      (await query.execute(db)).rows.map((r) => r.k).sort();
    expect(
      await kept(
        sql<{
          k: string;
        }>`select route as k from audit_records where record_id = any(${audit}::uuid[])`,
      ),
    ).toEqual(["new", "repeated until now"]);
    expect(
      await kept(
        sql<{
          k: string;
        }>`select serial as k from issued_certificates where workspace_id = ${w}`,
      ),
    ).toEqual([certs[1]]);
    expect(
      await kept(
        sql<{
          k: string;
        }>`select id::text as k from enrollment_grants where workspace_id = ${w}`,
      ),
    ).toEqual([grants[2]]);
    expect(
      await kept(
        sql<{
          k: string;
        }>`select id::text as k from person_sessions where id = any(${sessions}::uuid[])`,
      ),
    ).toEqual([sessions[1]]);
    expect(
      await kept(sql<{ k: string }>`select event_id::text as k from webhook_deliveries
        where subscription_id = ${subscription}`),
    ).toEqual(["2", "3"]);
    expect(
      (
        await sql<{ n: number | string }>`select count(*) as n from schedule_fires
          where schedule_id = ${schedule}`.execute(db)
      ).rows.map((r) => Number(r.n)),
      "the newest fire stays, however old",
    ).toEqual([1]);
    expect(
      await kept(sql<{ k: string }>`select runner_id as k from runners where workspace_id = ${w}`),
    ).toEqual(["here"]);
    expect(
      await kept(
        sql<{
          k: string;
        }>`select runner_id as k from inventory_reports where workspace_id = ${w}`,
      ),
    ).toEqual(["here"]);
  });

  it("two pruners at once share the work: every old job deleted once, no error", async () => {
    const db = cp.plane.store.db;
    const w = ws();
    const n = 250;
    await sql`insert into jobs (id, workspace_id, labels, kind, spec, state, priority,
        max_attempts, request_sha256, settled_at)
      select gen_random_uuid(), ${w}, '{}', 'container', '{}', 'succeeded', 0, 1, 'x',
        now() - interval '2 hours' from generate_series(1, ${n})`.execute(db);
    await sql`insert into stream_messages (job_id, stream, lease_id, attempt, sequence, data)
      select id, 'logs', 0, 1, 1, '"x"' from jobs where workspace_id = ${w}`.execute(db);
    const a = createRetention({ store: cp.plane.store, retentions: { jobs: hour } });
    const b = createRetention({ store: cp.plane.store, retentions: { jobs: hour } });
    try {
      const [ra, rb] = await Promise.all([a.pruneAll(), b.pruneAll()]);
      expect(ra.jobs + rb.jobs).toBeGreaterThanOrEqual(n);
      expect([...a.report(), ...b.report()].filter((r) => r.lastError)).toEqual([]);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
    const { rows } = await sql<{ n: number | string }>`select
        (select count(*) from jobs where workspace_id = ${w})
        + (select count(*) from stream_messages m join jobs j on j.id = m.job_id
            where j.workspace_id = ${w}) as n`.execute(db);
    expect(Number(rows[0]!.n)).toBe(0);
  });

  it("with a retention of a second the jobs and their lines level off while jobs keep coming", async () => {
    const db = cp.plane.store.db;
    const w = ws();
    const perRound = 3;
    const rounds = 6;
    const kept: number[] = [];
    await withRetention({ jobs: 1000 }, async (r) => {
      for (let round = 0; round < rounds; round++) {
        for (let i = 0; i < perRound; i++) await settledJobWithLines(w);
        // Past the retention for the jobs of the round before, not for this round's.
        await sleep(1100);
        await r.pruneAll();
        const { rows } = await sql<{ jobs: number | string; lines: number | string }>`select
              (select count(*) from jobs where workspace_id = ${w}) as jobs,
              (select count(*) from stream_messages m join jobs j on j.id = m.job_id
                where j.workspace_id = ${w}) as lines`.execute(db);
        kept.push(Number(rows[0]!.jobs));
        expect(Number(rows[0]!.lines)).toBe(Number(rows[0]!.jobs) * 5);
      }
    });
    // Without retention the table would hold perRound * rounds jobs; with it, never more than
    // the jobs settled within the last retention period plus one round.
    expect(Math.max(...kept), JSON.stringify(kept)).toBeLessThanOrEqual(2 * perRound);
  }, 60_000);

  it("counts what the server's pruner deleted in its metrics and shows it in the doctor", async () => {
    const w = ws();
    await sql`insert into events (type, workspace_id, at) select 'job.queued', ${w}, now() -
      interval '1 minute' from generate_series(1, 3)`.execute(cp.plane.store.db);
    const metricsUrl = cp.plane.metrics!.url;
    await eventually(
      "the server's pruner to delete the events",
      async () =>
        (await scrape(metricsUrl)).value("forelead_retention_pruned_total", { kind: "events" }) >= 3
          ? true
          : undefined,
      20_000,
    );
    const metrics = await scrape(metricsUrl);
    expect(metrics.value("forelead_retention_prune_failures_total", { kind: "jobs" })).toBe(0);
    const doctor = await admin.rest.request("GET", "/v1/admin/doctor");
    expect(doctor.status, doctor.text).toBe(200);
    const check = (
      doctor.json.checks as Array<{ name: string; status: string; detail: string }>
    ).find((c) => c.name === "retention");
    expect(check?.status, doctor.text).toBe("ok");
    expect(check?.detail).toMatch(/events 1s: [1-9]\d* pruned, last run \d{4}-/);
    expect(check?.detail).toContain("audit 9600h: 0 pruned");
  });
});
