// A seconds-field schedule on two replicas for a minute, by hand (issue 50): the scenario of
// test/integration/schedule-replicas.test.ts (which runs ~10 s in CI) at its full length, with
// the replicas as two `forelead serve` processes on one Postgres. Reports the fires per due time
// (exactly one each), the distinct idempotency keys, the jobs, and which replica fired each due
// time: each process connects with its own application_name (PGAPPNAME), and a trigger this script
// adds to its throwaway database records that name for every schedule_fires row.
// Run: DATABASE_URL=postgres://… npm run bench:schedule-replicas [-- --seconds 60 --cron '…']
import pg from "pg";
import { createRestClient } from "../test/support/clients.js";
import { startPlanes, type Planes } from "./lib/control-planes.js";
import { freshDatabase } from "./lib/database.js";
import { intFlag, parseOptions } from "./lib/options.js";
import { createBenchPki } from "./lib/pki.js";
import { publishScenario } from "./lib/report.js";

const options = parseOptions(process.argv.slice(2), { seconds: "string", cron: "string" });
if (!options.databaseUrl) throw new Error("schedule-replicas needs DATABASE_URL (two replicas)");
const seconds = intFlag(
  options.flags.seconds,
  "seconds",
  options.size === "tiny" ? 10 : 60,
  1,
  600,
);
const cron = String(options.flags.cron ?? "*/5 * * * * *");
const started = performance.now();

const pki = await createBenchPki();
const database = await freshDatabase(options.databaseUrl, options.databaseName);
const planes: Planes[] = [];
const names = ["replica-a", "replica-b"];
const saved = process.env.PGAPPNAME;
let report: Record<string, unknown>;
try {
  for (const name of names) {
    process.env.PGAPPNAME = name; // inherited by the serve process; pg reads it
    planes.push(
      await startPlanes({ pki, database: database.location, mode: "processes", count: 1 }),
    );
  }
  if (saved === undefined) delete process.env.PGAPPNAME;
  else process.env.PGAPPNAME = saved;
  const sqlClient = new pg.Client({ connectionString: database.location });
  await sqlClient.connect();
  try {
    await sqlClient.query(`
      create table bench_fire_replica (schedule_id uuid, due_at timestamptz, replica text,
        backend int);
      create function bench_fire_replica() returns trigger language plpgsql as $$
      begin
        insert into bench_fire_replica values (new.schedule_id, new.due_at,
          current_setting('application_name'), pg_backend_pid());
        return new;
      end $$;
      create trigger bench_fire_replica after insert on schedule_fires
        for each row execute function bench_fire_replica();`);
    const admin = createRestClient(planes[0]!.urls[0]!, pki.ca.certPem, pki.admin);
    const created = await admin.request("POST", "/v1/admin/schedules", {
      apiVersion: "v1",
      name: "two-replicas",
      workspaceId: "wrep",
      cron,
      timeZone: "UTC",
      job: { labels: ["linux"], spec: { image: "busybox", argv: ["true"], timeoutSeconds: 60 } },
    });
    if (created.status !== 200) throw new Error(`create schedule: ${created.text}`);
    const id = created.json.schedule.id as string;
    console.log(`schedule-replicas: ${cron} on ${names.join(" and ")} for ${seconds} s`);
    await new Promise((r) => setTimeout(r, seconds * 1000 + 500));
    const paused = await admin.request("POST", `/v1/admin/schedules/${id}/pause`, {
      apiVersion: "v1",
    });
    if (paused.status !== 200) throw new Error(`pause schedule: ${paused.text}`);
    await admin.close();

    const { rows: fires } = await sqlClient.query<{
      due_at: Date;
      fired_at: Date;
      cause: string;
      outcome: string;
      job_id: string | null;
      idempotency_key: string | null;
    }>(`select * from schedule_fires where schedule_id = $1 order by due_at`, [id]);
    const { rows: jobs } = await sqlClient.query<{ id: string; idempotency_key: string }>(
      `select id, idempotency_key from jobs where workspace_id = 'wrep'`,
    );
    const { rows: by } = await sqlClient.query<{ due_at: Date; replica: string }>(
      `select due_at, replica from bench_fire_replica where schedule_id = $1`,
      [id],
    );
    const perDue = new Map<number, number>();
    for (const f of fires)
      perDue.set(f.due_at.getTime(), (perDue.get(f.due_at.getTime()) ?? 0) + 1);
    const dues = [...perDue.keys()].sort((a, b) => a - b);
    const gaps = new Set(dues.slice(1).map((d, i) => d - dues[i]!));
    const replicaOf = new Map(by.map((r) => [r.due_at.getTime(), r.replica]));
    const byReplica: Record<string, number> = {};
    for (const d of dues)
      byReplica[replicaOf.get(d) ?? "?"] = (byReplica[replicaOf.get(d) ?? "?"] ?? 0) + 1;
    const lateMs = fires.map((f) => f.fired_at.getTime() - f.due_at.getTime());
    report = {
      scheduleId: id,
      cron,
      seconds,
      dueTimes: dues.length,
      fires: fires.length,
      firesPerDueTime: [...new Set(perDue.values())],
      gapsMs: [...gaps],
      causes: [...new Set(fires.map((f) => `${f.cause}/${f.outcome}`))],
      jobs: jobs.length,
      distinctJobKeys: new Set(jobs.map((j) => j.idempotency_key)).size,
      firesMatchJobs:
        new Set(fires.map((f) => f.job_id)).size === jobs.length &&
        jobs.every((j) => fires.some((f) => f.job_id === j.id)),
      keysAsRule: fires.every(
        (f) => f.idempotency_key === `schedule:${id}:${f.due_at.toISOString()}`,
      ),
      byReplica,
      firedLateMs: { min: Math.min(...lateMs), max: Math.max(...lateMs) },
      timeline: dues.map((d) => `${new Date(d).toISOString().slice(11, 19)} ${replicaOf.get(d)}`),
    };
  } finally {
    await sqlClient.end();
  }
} finally {
  for (const p of planes) await p.close();
  await database.drop();
  await pki.dispose();
}

const r = report as {
  dueTimes: number;
  fires: number;
  firesPerDueTime: number[];
  jobs: number;
  distinctJobKeys: number;
  byReplica: Record<string, number>;
  firedLateMs: { min: number; max: number };
};
await publishScenario(options, started, {
  scenario: "schedule-replicas",
  title: "Schedule on two replicas",
  notes: [
    `${cron} for ${seconds} s on two forelead serve processes sharing one Postgres database.`,
    "The replica of a fire is the application_name of the connection that inserted its " +
      "schedule_fires row (a trigger added by this script).",
  ],
  table: {
    title: `${cron} on two replicas for ${seconds} s`,
    columns: [
      "due times",
      "fires",
      "fires per due time",
      "jobs",
      "distinct keys",
      "by replica",
      "fired late ms (min–max)",
    ],
    rows: [
      [
        r.dueTimes,
        r.fires,
        r.firesPerDueTime.join(","),
        r.jobs,
        r.distinctJobKeys,
        Object.entries(r.byReplica)
          .map(([k, v]) => `${k} ${v}`)
          .join(", "),
        `${r.firedLateMs.min}–${r.firedLateMs.max}`,
      ],
    ],
  },
  figures: report,
});
