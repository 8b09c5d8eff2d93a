// Demand at 100,000 queued jobs: the time of GET /v1/admin/demand's two statements
// (src/broker/fleet/demand.ts) over every workspace and over one, with 4 scaling groups and 40
// runners. Queued jobs are bulk-inserted with generate_series (10 workspaces, 4 kinds of labels
// and requirements, 1 in 10 of a concurrency group), then VACUUM ANALYZE.
// Run: DATABASE_URL=postgres://… node --import tsx bench/demand-scale.ts [--jobs N]
import { sql } from "kysely";
import { readDemand, readGroupDemand } from "../src/broker/fleet/demand.js";
import { openStore } from "../src/store/database.js";
import { freshDatabase } from "./lib/database.js";
import { intFlag, parseOptions } from "./lib/options.js";

const options = parseOptions(process.argv.slice(2), { jobs: "string" });
const jobs = intFlag(options.flags.jobs, "jobs", options.size === "tiny" ? 10_000 : 100_000);
if (!options.databaseUrl)
  throw new Error("demand-scale measures a real Postgres: set DATABASE_URL");
const database = await freshDatabase(options.databaseUrl, "forelead_bench_demand");
const store = await openStore(database.location);
const db = store.db;
const offlineSeconds = 90;
const runs = 20;
try {
  await seed();
  const cases: Array<[string, () => Promise<unknown>]> = [
    ["demand, every workspace", () => readDemand(db, offlineSeconds)],
    ["demand, one workspace", () => readDemand(db, offlineSeconds, "w3")],
    ["one group (KEDA's read)", () => readGroupDemand(db, offlineSeconds, "g3")],
  ];
  for (const [name, read] of cases) {
    await read(); // warm: plans and cache
    const times: number[] = [];
    for (let i = 0; i < runs; i++) {
      const t0 = performance.now();
      await read();
      times.push(performance.now() - t0);
    }
    times.sort((a, b) => a - b);
    const at = (q: number) => times[Math.min(times.length - 1, Math.floor(q * times.length))]!;
    console.log(
      `${name}: p50 ${at(0.5).toFixed(1)} ms, p95 ${at(0.95).toFixed(1)} ms (${runs} runs)`,
    );
  }
} finally {
  await store.close();
  await database.drop();
}

async function seed(): Promise<void> {
  const t0 = performance.now();
  await sql`
    insert into jobs (id, workspace_id, labels, kind, spec, state, priority, max_attempts,
      request_sha256, created_at, claimable_at, req_architecture, concurrency_key,
      concurrency_limit)
    select gen_random_uuid(), 'w' || (i % 10),
      case i % 4 when 1 then array['gpu', 'linux'] when 3 then array['windows']
        else array['linux'] end,
      'command', '{"image":"busybox","argv":["true"]}'::jsonb, 'queued', 0, 3, 'bench',
      now() - i * interval '10 milliseconds', now() - i * interval '10 milliseconds',
      case when i % 4 = 2 then 'arm64' end,
      case when i % 10 = 0 then 'deploy' end, case when i % 10 = 0 then 2 end
    from generate_series(1, ${jobs}::int) i`.execute(db);
  await sql`
    insert into runners (workspace_id, runner_id, slots, cpu, memory_bytes, architecture, labels,
      clock_offset_ns)
    select 'w' || (i % 10), 'g' || (i % 10) || '-' || i, 2, 2, 1073741824, 'amd64',
      array['linux'], 0
    from generate_series(1, 40) i`.execute(db);
  await sql`
    insert into scaling_groups (name, workspace_id, labels, architecture, min_runners, max_runners,
      slots_per_runner, idle_seconds, cooldown_seconds, provider, controller, lease_expires_at)
    select 'g' || i, 'w' || i, array['linux'], 'amd64', 0, 10, 2, 30, 0, 'process', 'bench',
      now() + interval '1 hour'
    from generate_series(0, 3) i`.execute(db);
  await sql`vacuum analyze jobs`.execute(db);
  await sql`vacuum analyze runners`.execute(db);
  console.log(
    `seeded ${jobs} queued jobs, 40 runners and 4 groups in ` +
      `${((performance.now() - t0) / 1000).toFixed(1)} s`,
  );
}
