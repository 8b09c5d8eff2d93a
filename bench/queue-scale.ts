// Scenario 5, scale of the queue: claim latency with 10,000 and 1,000,000
// queued jobs (flat is the goal), and the plan of the claim statement
// (EXPLAIN (ANALYZE, BUFFERS) through auto_explain of the statements inside
// the claim function, as the broker really calls it). --fairness-keys 0,1000
// spreads the queue over that many fairness keys: fair shares off and on.
// Jobs are bulk-inserted with SQL; one runner then claims and completes
// through the control plane, one claim at a time. Run: npm run bench:queue
import { sql } from "kysely";
import { claimJob, claimLeases } from "../src/broker/leases/claim.js";
import type { Store } from "../src/store/database.js";
import { startPlanes } from "./lib/control-planes.js";
import { freshDatabase } from "./lib/database.js";
import { forkProcess } from "./lib/fork.js";
import { intFlag, intListFlag, parseOptions } from "./lib/options.js";
import { captureStatement, explainNested } from "./lib/plans.js";
import { createBenchPki } from "./lib/pki.js";
import { bulkInsertJobs } from "./lib/queue-sql.js";
import { publishScenario } from "./lib/report.js";
import { summarize, type LatencySummary } from "./lib/stats.js";

const options = parseOptions(process.argv.slice(2), {
  queued: "string",
  claims: "string",
  "fairness-keys": "string",
});
const tiny = options.size === "tiny";
const queueSizes = intListFlag(
  options.flags.queued,
  "queued",
  tiny ? [1_000, 5_000] : [10_000, 1_000_000],
);
const claims = intFlag(options.flags.claims, "claims", tiny ? 20 : 2_000);
// Fair shares on and off: the queue spread over this many fairness keys (0: no keys).
const keyCounts = intListFlag(options.flags["fairness-keys"], "fairness-keys", [0], 0);
const workspaceId = "w1";

interface Scale {
  readonly queued: number;
  /** Fairness keys the queue is spread over (0: none). */
  readonly fairnessKeys: number;
  readonly insertSeconds: number;
  readonly tableBytes: number;
  readonly claimIndexBytes: number;
  readonly claim: LatencySummary;
  /**
   * Claim latency over the first and the last tenth of the claims: growth while the head of the
   * queue is consumed.
   */
  readonly firstTenthP50: number;
  readonly lastTenthP50: number;
  /**
   * Duration of the claim statement inside the function, as auto_explain timed it (ANALYZE), ms;
   * null when embedded.
   */
  readonly statementMs: number | null;
  /** auto_explain's plan of that statement; undefined when embedded (no auto_explain). */
  readonly plan: string | undefined;
  readonly batchPlan: string | undefined;
  /** Whether both plans walk the index jobs_claimable; undefined when there is no plan. */
  readonly usesClaimIndex: boolean | undefined;
}

const started = performance.now();
const pki = await createBenchPki();
const scales: Scale[] = [];
try {
  for (const queued of queueSizes)
    for (const keys of keyCounts) scales.push(await measure(queued, keys));
} finally {
  await pki.dispose();
}

const notes = [
  `Jobs are inserted by one INSERT … SELECT generate_series (the jobs ` +
    `columns of src/store/schema.sql), then ANALYZE; one runner claims and ` +
    `completes ${claims.toLocaleString("en-US")} of them through the control ` +
    `plane (REST over HTTP/2 + mTLS, one at a time, control plane in the ` +
    `orchestrating process, runner in a client process).`,
  "The claim walks the partial index jobs_claimable (workspace_id, " +
    "priority desc, fair_tag nulls first, created_at, id) where state = 'queued' and stops at the " +
    "first row it can lock: its cost does not depend on how many jobs wait " +
    "behind it.",
  "A claimed job leaves the partial index only when vacuum removes its old " +
    "row version; until then the index scan steps over the entries of " +
    "claimed jobs at the head of the queue (first vs last tenth shows " +
    "whether that adds up).",
];
if (!options.databaseUrl) notes.push("No DATABASE_URL: ran on the embedded database (PGlite).");

await publishScenario(options, started, {
  scenario: "queue-scale",
  title: "Scale of the queue",
  notes,
  table: {
    title: `Claim latency by queue length (${claims.toLocaleString("en-US")} claims, one runner)`,
    columns: [
      "queued jobs",
      "fairness keys",
      "claim p50 ms",
      "claim p99 ms",
      "first 10% p50",
      "last 10% p50",
      "statement ms",
      "index used",
      "insert s",
    ],
    rows: scales.map((s) => [
      s.queued,
      s.fairnessKeys,
      s.claim.p50,
      s.claim.p99,
      s.firstTenthP50,
      s.lastTenthP50,
      s.statementMs,
      s.usesClaimIndex === undefined ? "– (embedded)" : s.usesClaimIndex ? "jobs_claimable" : "NO",
      s.insertSeconds,
    ]),
  },
  figures: { claims, scales },
});

async function measure(queued: number, fairnessKeys: number): Promise<Scale> {
  console.log(
    `queue-scale: ${queued.toLocaleString("en-US")} queued jobs, ${fairnessKeys} fairness keys`,
  );
  const database = await freshDatabase(options.databaseUrl, options.databaseName);
  const client = forkProcess(new URL("./clients/runners.ts", import.meta.url));
  try {
    const planes = await startPlanes({
      pki,
      database: database.location,
      mode: "in-process",
      count: 1,
    });
    try {
      const store = planes.inProcess!.store;
      const t0 = performance.now();
      await bulkInsertJobs(store.db, queued, workspaceId, fairnessKeys);
      const insertSeconds = Math.round((performance.now() - t0) / 100) / 10;
      await client.call({
        type: "connect",
        urls: planes.urls,
        caPem: pki.ca.certPem,
        runners: await pki.runners("q", 1, workspaceId),
      });
      const drained = await client.call<{ claimMs: number[] }>({ type: "drain", maxJobs: claims });
      const tenth = Math.max(1, Math.floor(drained.claimMs.length / 10));
      const { plan, batchPlan } = await plans(store, database.location);
      const sizes = await sql<{
        t: number;
        i: number;
      }>`select pg_table_size('jobs')::float8 as t, pg_relation_size('jobs_claimable')::float8 as i`.execute(
        store.db,
      );
      const execution = plan ? /duration: ([\d.]+) ms/.exec(plan) : null;
      return {
        queued,
        fairnessKeys,
        insertSeconds,
        tableBytes: sizes.rows[0]!.t,
        claimIndexBytes: sizes.rows[0]!.i,
        claim: summarize(drained.claimMs),
        firstTenthP50: summarize(drained.claimMs.slice(0, tenth)).p50,
        lastTenthP50: summarize(drained.claimMs.slice(-tenth)).p50,
        statementMs: execution ? Number(execution[1]) : null,
        plan,
        batchPlan,
        usesClaimIndex:
          plan === undefined
            ? undefined
            : /jobs_claimable/.test(plan) && /jobs_claimable/.test(batchPlan ?? ""),
      };
    } finally {
      await client.close();
      await planes.close();
    }
  } finally {
    await database.drop();
  }
}

/**
 * The plans of the claim the broker sends: claimJob's (a claim alone) and a
 * batch's (claimLeases, here of two runners): the statement is captured by
 * running it once, then run again under auto_explain in a transaction that
 * is rolled back. The plan shown is the one of the claim statement inside
 * the function (the one that walks the queue). Undefined when embedded.
 */
async function plans(
  store: Store,
  location: string,
): Promise<{ plan: string | undefined; batchPlan: string | undefined }> {
  for (const id of ["explain-a", "explain-b"]) {
    await sql`insert into runners (workspace_id, runner_id, slots, cpu, memory_bytes, architecture,
      labels, clock_offset_ns)
      values (${workspaceId}, ${id}, 1000, 1, 1, 'amd64', array['linux'], 0)`.execute(store.db);
  }
  const claim = await captureStatement(store.db, /forelead_claim/, (db) =>
    claimJob(db, { workspaceId, runnerId: "explain-a" }, 30),
  );
  const batch = await captureStatement(store.db, /forelead_claim/, (db) =>
    claimLeases(
      db,
      [
        { workspaceId, runnerId: "explain-a" },
        { workspaceId, runnerId: "explain-b" },
      ],
      30,
    ),
  );
  const walk = (plans: string[] | undefined) =>
    plans && plans.filter((p) => /skip locked/i.test(p)).join("\n\n");
  return {
    plan: walk(await explainNested(location, claim)),
    batchPlan: walk(await explainNested(location, batch)),
  };
}
