// The peers, driven the way their documentation says to, on the same Postgres
// server as ours, each in its own fresh database, with the same connection
// budget as one control plane (a pool of 20).
import { Logger, makeWorkerUtils, run, runMigrations } from "graphile-worker";
import PgBoss from "pg-boss";
import pg from "pg";
import type { CpuMeter, CpuUse } from "./cpu.js";
import { epochMs, nowMs } from "./stats.js";

/** Database connections each system may hold: what one control plane's pool holds. */
export const poolSize = 20;

/**
 * Errors only: graphile-worker logs a line per job by default, which would measure the terminal.
 */
const quietLogger = new Logger(() => (level, message) => {
  if (level === "error") console.error(`graphile-worker: ${message}`);
});

/** A throughput run of a peer. */
export interface PeerThroughput {
  readonly completed: number;
  readonly elapsedMs: number;
  /** Per-job fetch latency, where the peer's API exposes it. */
  readonly claimMs: readonly number[];
  /**
   * CPU over the run, measured before the peer's connections close (their backends' CPU goes with
   * them).
   */
  readonly cpu: CpuUse | undefined;
}

/** Starts a CPU measurement (bench/lib/cpu.ts) when the timed part begins. */
export type StartMeter = () => CpuMeter;

const deadlineMs = 300_000;

async function exec(url: string, query: string): Promise<pg.QueryResult> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await client.query(query);
  } finally {
    await client.end();
  }
}

/**
 * Polls `query` (one row, column n) on one connection every 10 ms until `done(n)`; bounded by the
 * run's deadline.
 */
async function waitForCount(
  url: string,
  query: string,
  done: (n: number) => boolean,
  started: number,
  what: string,
): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    while (!done(Number((await client.query<{ n: string }>(query)).rows[0]!.n))) {
      if (nowMs() - started > deadlineMs) throw new Error(`timed out: ${what}`);
      await new Promise((r) => setTimeout(r, 10));
    }
  } finally {
    await client.end();
  }
}

/**
 * A pool for graphile-worker that this module ends itself, with an error
 * listener: graphile-worker's own pool can outlive stop() by a moment, and a
 * connection cut then (the database is dropped) is an unhandled error.
 */
async function withGraphilePool<T>(
  url: string,
  max: number,
  use: (pool: pg.Pool) => Promise<T>,
): Promise<T> {
  const pool = new pg.Pool({ connectionString: url, max });
  pool.on("error", () => {});
  pool.on("connect", (client) => client.on("error", () => {}));
  try {
    return await use(pool);
  } finally {
    await pool.end();
  }
}

/** Enqueues `count` no-op jobs in batches of 5,000 (graphile_worker.add_jobs). */
export async function graphileEnqueue(url: string, count: number): Promise<void> {
  await withGraphilePool(url, 4, (pool) => graphileEnqueueWith(pool, count));
}

async function graphileEnqueueWith(pgPool: pg.Pool, count: number): Promise<void> {
  await runMigrations({ pgPool, logger: quietLogger });
  const utils = await makeWorkerUtils({ pgPool, logger: quietLogger });
  try {
    for (let done = 0; done < count; done += 5000) {
      await utils.addJobs(
        Array.from({ length: Math.min(5000, count - done) }, () => ({
          identifier: "noop",
          payload: {},
        })),
      );
    }
    await utils.withPgClient((c) => c.query("analyze"));
  } finally {
    await utils.release();
  }
}

/**
 * graphile-worker `run()` with `concurrency` no-op tasks until `count` jobs
 * ran; the clock stops when the last completion is committed (its completion
 * is not awaited by the task, so the jobs table is watched until it is empty).
 */
export async function graphileThroughput(
  url: string,
  count: number,
  concurrency: number,
  startMeter: StartMeter,
): Promise<PeerThroughput> {
  return withGraphilePool(url, poolSize, (pool) =>
    graphileThroughputWith(url, pool, count, concurrency, startMeter),
  );
}

async function graphileThroughputWith(
  url: string,
  pgPool: pg.Pool,
  count: number,
  concurrency: number,
  startMeter: StartMeter,
): Promise<PeerThroughput> {
  let ran = 0;
  let allRan: () => void = () => {};
  const everyJob = new Promise<void>((resolve) => (allRan = resolve));
  const meter = startMeter();
  const started = nowMs();
  const runner = await run({
    pgPool,
    concurrency,
    noHandleSignals: true,
    pollInterval: 2000,
    logger: quietLogger,
    taskList: {
      noop: async () => {
        if (++ran === count) allRan();
      },
    },
  });
  try {
    await withDeadline(everyJob, `graphile-worker ran ${ran} of ${count} jobs`);
    await waitForCount(
      url,
      "select count(*) as n from graphile_worker.jobs",
      (n) => n === 0,
      started,
      "graphile-worker completing every job",
    );
    const elapsedMs = nowMs() - started;
    return { completed: ran, elapsedMs, claimMs: [], cpu: meter.stop() };
  } finally {
    await runner.stop();
  }
}

/**
 * graphile-worker pickup latency: `concurrency` workers idle, then `total`
 * jobs added one at a time at `ratePerSecond` (open loop, the same process);
 * latency from calling add_job to the task starting.
 */
export async function graphilePickup(
  url: string,
  total: number,
  ratePerSecond: number,
  concurrency: number,
  settleMs: number,
): Promise<{ latencies: number[]; enqueueLatencies: number[] }> {
  return withGraphilePool(url, poolSize, (pool) =>
    graphilePickupWith(pool, total, ratePerSecond, concurrency, settleMs),
  );
}

async function graphilePickupWith(
  pgPool: pg.Pool,
  total: number,
  ratePerSecond: number,
  concurrency: number,
  settleMs: number,
): Promise<{ latencies: number[]; enqueueLatencies: number[] }> {
  await runMigrations({ pgPool, logger: quietLogger });
  const startedAt = new Map<string, number>();
  let allStarted: () => void = () => {};
  const everyJob = new Promise<void>((resolve) => (allStarted = resolve));
  const runner = await run({
    pgPool,
    concurrency,
    noHandleSignals: true,
    pollInterval: 2000,
    logger: quietLogger,
    taskList: {
      noop: async (payload) => {
        startedAt.set((payload as { key: string }).key, epochMs());
        if (startedAt.size === total) allStarted();
      },
    },
  });
  const utils = await makeWorkerUtils({ pgPool, logger: quietLogger });
  try {
    await new Promise((r) => setTimeout(r, settleMs));
    const sentAt = new Map<string, number>();
    const addedAt = new Map<string, number>();
    const adds: Array<Promise<unknown>> = [];
    const start = nowMs();
    for (let i = 0; i < total; i++) {
      const wait = start + (i * 1000) / ratePerSecond - nowMs();
      if (wait > 1) await new Promise((r) => setTimeout(r, wait));
      const key = `j${i}`;
      sentAt.set(key, epochMs());
      adds.push(utils.addJob("noop", { key }).then(() => addedAt.set(key, epochMs())));
    }
    await Promise.all(adds);
    await withDeadline(everyJob, `graphile-worker started ${startedAt.size} of ${total} jobs`);
    return {
      latencies: [...sentAt].map(([key, t0]) => startedAt.get(key)! - t0),
      enqueueLatencies: [...sentAt].map(([key, t0]) => addedAt.get(key)! - t0),
    };
  } finally {
    await utils.release();
    await runner.stop();
  }
}

async function startBoss(url: string): Promise<PgBoss> {
  const boss = new PgBoss({
    connectionString: url,
    max: poolSize,
    supervise: false,
    schedule: false,
  });
  boss.on("error", (err: Error) => console.error(`pg-boss: ${err.message}`));
  await boss.start();
  await boss.createQueue("noop");
  return boss;
}

/** Enqueues `count` no-op jobs in batches of 5,000 (pg-boss insert). */
export async function bossEnqueue(url: string, count: number): Promise<void> {
  const boss = await startBoss(url);
  try {
    for (let done = 0; done < count; done += 5000) {
      await boss.insert(
        Array.from({ length: Math.min(5000, count - done) }, () => ({ name: "noop", data: {} })),
      );
    }
    await exec(url, "analyze");
  } finally {
    await boss.stop({ graceful: false, wait: true });
  }
}

/**
 * pg-boss as a runner would use it: `concurrency` loops, each fetching one
 * job and completing it, until the queue is empty. (Its `work()` polls at
 * most every 0.5 s per worker; that mode is measured by bossWork.)
 */
export async function bossFetchComplete(
  url: string,
  count: number,
  concurrency: number,
  startMeter: StartMeter,
): Promise<PeerThroughput> {
  const boss = await startBoss(url);
  try {
    const claimMs: number[] = [];
    let completed = 0;
    const meter = startMeter();
    const started = nowMs();
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (nowMs() - started < deadlineMs) {
          const t0 = nowMs();
          const [job] = await boss.fetch("noop");
          if (!job) return;
          claimMs.push(nowMs() - t0);
          await boss.complete("noop", job.id);
          completed++;
        }
      }),
    );
    const elapsedMs = nowMs() - started;
    const cpu = meter.stop();
    if (completed !== count) throw new Error(`pg-boss completed ${completed} of ${count} jobs`);
    return { completed, elapsedMs, claimMs, cpu };
  } finally {
    await boss.stop({ graceful: false, wait: true });
  }
}

/**
 * pg-boss `work()`: `workers` workers fetching `batchSize` jobs per poll
 * (polls are at least 0.5 s apart per worker, its minimum). The clock stops
 * when every job is stored as completed.
 */
export async function bossWork(
  url: string,
  count: number,
  workers: number,
  batchSize: number,
  startMeter: StartMeter,
): Promise<PeerThroughput> {
  const boss = await startBoss(url);
  try {
    let handled = 0;
    let allHandled: () => void = () => {};
    const everyJob = new Promise<void>((resolve) => (allHandled = resolve));
    const meter = startMeter();
    const started = nowMs();
    for (let i = 0; i < workers; i++) {
      await boss.work("noop", { batchSize, pollingIntervalSeconds: 0.5 }, async (jobs) => {
        handled += jobs.length;
        if (handled >= count) allHandled();
      });
    }
    await withDeadline(everyJob, `pg-boss work() handled ${handled} of ${count} jobs`);
    await waitForCount(
      url,
      "select count(*) as n from pgboss.job where state = 'completed'",
      (n) => n >= count,
      started,
      "pg-boss work() completing every job",
    );
    const elapsedMs = nowMs() - started;
    return { completed: count, elapsedMs, claimMs: [], cpu: meter.stop() };
  } finally {
    await boss.stop({ graceful: false, wait: true });
  }
}

async function withDeadline(p: Promise<void>, what: string): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      p,
      new Promise<never>(
        (_, reject) =>
          (timer = setTimeout(() => reject(new Error(`timed out: ${what}`)), deadlineMs)),
      ),
    ]);
  } finally {
    clearTimeout(timer);
  }
}
