// Stats on 1,000,000 settled jobs: the plan and time of the GetStats
// statement (src/broker/stats.ts) for a 7-day and a 30-day window, over
// every workspace and over one. Jobs and leases are bulk-inserted with
// generate_series, spread evenly over 60 days, then VACUUM ANALYZE.
// Run: DATABASE_URL=postgres://… node --import tsx bench/stats-scale.ts [--jobs N]
import { sql } from "kysely";
import { jobStats, statsSettings, statsStatement } from "../src/broker/stats.js";
import { openStore } from "../src/store/database.js";
import { freshDatabase } from "./lib/database.js";
import { intFlag, parseOptions } from "./lib/options.js";

const options = parseOptions(process.argv.slice(2), {
  jobs: "string",
  keep: "boolean",
  reuse: "boolean",
});
// --keep leaves the seeded database for another run; --reuse explains on it without seeding again.
const { keep, reuse } = options.flags;
const jobs = intFlag(options.flags.jobs, "jobs", options.size === "tiny" ? 10_000 : 1_000_000);
if (!options.databaseUrl) throw new Error("stats-scale measures a real Postgres: set DATABASE_URL");
const database = reuse
  ? existingDatabase(options.databaseUrl, "forelead_bench_stats")
  : await freshDatabase(options.databaseUrl, "forelead_bench_stats");
const store = await openStore(database.location);
const db = store.db;
try {
  if (!reuse) await seed();
  for (const days of [7, 30]) {
    for (const workspaceId of ["", "w3"]) {
      const query = {
        since: new Date(Date.now() - days * 86_400_000),
        until: new Date(),
        workspaceId,
      };
      const warm = performance.now();
      await jobStats(db, query);
      const wallMs = performance.now() - warm;
      // As jobStats runs it: in a transaction with its settings.
      const plan = await db.transaction().execute(async (trx) => {
        await statsSettings(trx);
        const { rows } = await sql<{
          "QUERY PLAN": string;
        }>`explain (analyze, buffers) ${statsStatement(query)}`.execute(trx);
        return rows.map((r) => r["QUERY PLAN"]);
      });
      console.log(
        `\n=== ${days}d window, ${workspaceId || "every workspace"}: jobStats wall ${wallMs.toFixed(0)} ms`,
      );
      console.log(plan.join("\n"));
    }
  }
} finally {
  await store.close();
  if (!keep && !reuse) await database.drop();
}

function existingDatabase(
  serverUrl: string,
  name: string,
): { location: string; drop(): Promise<void> } {
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return { location: url.toString(), drop: async () => {} };
}

async function seed(): Promise<void> {
  const t0 = performance.now();
  // i-th job: 10 workspaces, 50 runners; 5% cancelled before a lease, 10% failed (3 error codes),
  // 5% with a lost lease before the one that settled; wait 0-119 s, run 0-599 s.
  await sql`create temporary table seed as
    select i, gen_random_uuid() as id, 'w' || (i % 10) as ws, 'r' || (i % 50) as runner,
      now() - interval '60 days' - interval '1 hour' + i * (interval '60 days' / ${jobs}::int) as leased,
      (i % 120) * interval '1 second' as wait, (i % 600) * interval '1 second' as run
    from generate_series(1, ${jobs}::int) i`.execute(db);
  await sql`
    insert into jobs (id, workspace_id, labels, kind, spec, state, priority, attempts, max_attempts,
      request_sha256, error, created_at, updated_at, settled_at)
    select id, ws, array['linux'], 'command', '{"image":"busybox","argv":["true"]}'::jsonb,
      case when i % 20 = 0 then 'cancelled' when i % 10 = 1 then 'failed' else 'succeeded' end, 0,
      case when i % 20 = 0 then 0 when i % 20 = 3 then 2 else 1 end, 3, 'bench',
      case when i % 10 = 1 then jsonb_build_object('code', (array['exit_code', 'oom',
        'image_pull'])[1 + i % 3], 'message', 'bench', 'retryable', false) end,
      leased - wait, leased + run, leased + run
    from seed`.execute(db);
  await sql`
    insert into leases (token_sha256, job_id, workspace_id, runner_id, attempt, issued_at,
      expires_at, ended_at, end_reason)
    select sha256(convert_to(id::text, 'UTF8')), id, ws, runner, case when i % 20 = 3 then 2 else 1
      end, leased, leased + run + interval '30 seconds', leased + run, 'settled'
    from seed where i % 20 <> 0
    union all
    select sha256(convert_to(id::text || 'lost', 'UTF8')), id, ws, 'r' || ((i + 1) % 50), 1, leased
      - interval '60 seconds', leased - interval '30 seconds', leased - interval '30 seconds', 'expired'
    from seed where i % 20 = 3`.execute(db);
  // as autovacuum would after a load this size: statistics and the visibility map
  await sql`vacuum analyze jobs`.execute(db);
  await sql`vacuum analyze leases`.execute(db);
  const seedSeconds = (performance.now() - t0) / 1000;
  const {
    rows: [counts],
  } = await sql<{
    jobs: number;
    leases: number;
  }>`select (select count(*)::int from jobs) as jobs, (select count(*)::int from leases) as leases`.execute(
    db,
  );
  console.log(
    `seeded ${counts!.jobs} jobs and ${counts!.leases} leases in ${seedSeconds.toFixed(1)} s`,
  );
}
