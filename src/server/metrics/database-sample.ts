import { sql, type Kysely } from "kysely";
import type { Database } from "../../store/schema.js";
import { liveLeaseCount, runnerState, type RunnerState } from "../../broker/fleet/state.js";
import { readGroupsDemand, type GroupDemand } from "../../broker/fleet/demand.js";

/** The queue of one workspace at a scrape. */
interface WorkspaceQueue {
  readonly workspaceId: string;
  readonly queued: number;
  readonly running: number;
  /** Jobs suspended until their input request is answered (docs/suspend.md). */
  readonly waitingInput: number;
  /** Seconds since the oldest queued job was enqueued; undefined when none is queued. */
  readonly oldestQueuedSeconds: number | undefined;
}

/** What one scrape reads from the database. */
export interface DatabaseSample {
  /** Whether `select 1` answered. */
  readonly reachable: boolean;
  /** How long `select 1` took, in seconds; undefined when it failed. */
  readonly roundTripSeconds: number | undefined;
  /** Every workspace with queued or running jobs; empty when the database did not answer. */
  readonly workspaces: readonly WorkspaceQueue[];
  /** Runners by forelead_runner_state; empty when the database did not answer. */
  readonly runners: ReadonlyMap<RunnerState, number>;
  /** Every registered scaling group's demand; empty when the database did not answer. */
  readonly groups: readonly GroupDemand[];
}

/**
 * Reads the queue for a scrape, at most once per `ttlMs`: the gauges of one
 * scrape, and scrapes that arrive together or within the window, share one
 * round trip and one query, so a
 * scrape storm or many Prometheus servers do not load the database. The query
 * is one statement of two grouped branches, each on the partial index of its
 * state (jobs_claimable for queued, which holds workspace_id and created_at,
 * so its branch is an index-only scan; jobs_running_expiry for running, whose
 * rows are as many as the runners' busy slots; jobs_waiting_input for waiting_input).
 */
export function createDatabaseSampler(
  db: Kysely<Database>,
  ttlMs: number,
  offlineSeconds: number,
): () => Promise<DatabaseSample> {
  let cached: { sample: Promise<DatabaseSample>; settledAt: number | undefined } | undefined;
  return () => {
    // A sample still being read is shared; a read one is reused for ttlMs.
    if (cached && (cached.settledAt === undefined || performance.now() - cached.settledAt < ttlMs))
      return cached.sample;
    const entry: { sample: Promise<DatabaseSample>; settledAt: number | undefined } = {
      sample: sample(db, offlineSeconds),
      settledAt: undefined,
    };
    void entry.sample.then(() => (entry.settledAt = performance.now()));
    cached = entry;
    return entry.sample;
  };
}

async function sample(db: Kysely<Database>, offlineSeconds: number): Promise<DatabaseSample> {
  const startedAt = performance.now();
  try {
    await sql`select 1`.execute(db);
  } catch {
    return {
      reachable: false,
      roundTripSeconds: undefined,
      workspaces: [],
      runners: new Map(),
      groups: [],
    };
  }
  const roundTripSeconds = (performance.now() - startedAt) / 1000;
  try {
    const { rows } = await sql<{
      workspace_id: string;
      state: "queued" | "running" | "waiting_input";
      jobs: number;
      oldest_seconds: number | null;
    }>`
      select workspace_id, 'queued' as state, count(*)::int as jobs, extract(epoch from now() -
        min(created_at))::float8 as oldest_seconds
        from jobs where state = 'queued' group by workspace_id
      union all
      select workspace_id, 'running', count(*)::int, null from jobs where state = 'running' group by workspace_id
      union all
      select workspace_id, 'waiting_input', count(*)::int, null from jobs where state =
        'waiting_input' group by workspace_id`.execute(db);
    const byWorkspace = new Map<
      string,
      {
        workspaceId: string;
        queued: number;
        running: number;
        waitingInput: number;
        oldestQueuedSeconds: number | undefined;
      }
    >();
    for (const row of rows) {
      const w = byWorkspace.get(row.workspace_id) ?? {
        workspaceId: row.workspace_id,
        queued: 0,
        running: 0,
        waitingInput: 0,
        oldestQueuedSeconds: undefined,
      };
      byWorkspace.set(row.workspace_id, w);
      if (row.state === "queued") {
        w.queued = row.jobs;
        w.oldestQueuedSeconds = Math.max(0, Number(row.oldest_seconds));
      } else if (row.state === "waiting_input") w.waitingInput = row.jobs;
      else w.running = row.jobs;
    }
    // One row a state: the runners table holds one row per runner identity, a few hundred at most.
    const states = await sql<{ state: RunnerState; runners: number }>`
      select ${runnerState("r", liveLeaseCount("r"), offlineSeconds)} as state, count(*)::int as
        runners from runners r group by 1`.execute(db);
    return {
      reachable: true,
      roundTripSeconds,
      workspaces: [...byWorkspace.values()],
      runners: new Map(states.rows.map((r) => [r.state, r.runners])),
      groups: await readGroupsDemand(db, offlineSeconds),
    };
  } catch {
    return { reachable: false, roundTripSeconds, workspaces: [], runners: new Map(), groups: [] };
  }
}
