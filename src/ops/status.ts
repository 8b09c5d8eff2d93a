import { sql, type Kysely } from "kysely";
import { liveLeaseRow } from "../broker/leases/sql-fragments.js";
import { runnerState } from "../broker/fleet/state.js";
import { readGroupsDemand, type GroupDemand } from "../broker/fleet/demand.js";
import type { Database } from "../store/schema.js";
import { liveReplica } from "./replicas.js";

/** One workspace's queue. */
interface WorkspaceQueue {
  readonly workspaceId: string;
  readonly queued: number;
  readonly running: number;
  /** Seconds since the oldest queued job was enqueued; 0 when none is queued. */
  readonly oldestQueuedSeconds: number;
  readonly paused: boolean;
  /** Jobs suspended waiting for an answer (waiting_input). */
  readonly waitingInput: number;
}

/** Runner counts; see status.proto RunnerCounts for what each counts. */
interface RunnerCounts {
  readonly registered: number;
  readonly connected: number;
  readonly busy: number;
  readonly idle: number;
  readonly paused: number;
  readonly retired: number;
  readonly offline: number;
  readonly draining: number;
}

/** Capacity of connected runners, and what live leases leave of it on idle and busy ones. */
interface Pool {
  readonly slotsTotal: number;
  readonly slotsFree: number;
  readonly cpuTotal: number;
  readonly cpuFree: number;
  readonly memoryBytesTotal: number;
  readonly memoryBytesFree: number;
}

/** An issued certificate that ends soon. */
interface ExpiringCertificate {
  readonly serial: string;
  readonly spiffeId: string;
  readonly notAfter: Date;
}

/** A live replica's row. */
interface ReplicaRow {
  readonly id: string;
  readonly host: string;
  readonly pid: number;
  readonly version: string;
  readonly startedAt: Date;
  readonly lastSeenAt: Date;
}

/** What the database says about the fleet and the queue, as of one moment per statement. */
export interface FleetStatus {
  readonly workspaces: readonly WorkspaceQueue[];
  readonly runners: RunnerCounts;
  readonly pool: Pool;
  readonly replicas: readonly ReplicaRow[];
  readonly expiringWithin24h: number;
  /** The soonest of them, at most `expiringListed`. */
  readonly expiring: readonly ExpiringCertificate[];
  /** Every registered scaling group's demand (broker/fleet/demand.ts). */
  readonly scalingGroups: readonly GroupDemand[];
}

const expiringListed = 10;

/**
 * Reads the fleet in five statements: the queue per workspace (with pauses),
 * runners and pool together, live replicas, expiring certificates, scaling groups' demand. Each
 * runner counts in its forelead_runner_state (offline after `offlineSeconds`
 * of silence); live leases are liveLeaseRow's.
 */
export async function readFleetStatus(
  db: Kysely<Database>,
  offlineSeconds: number,
): Promise<FleetStatus> {
  const [workspaces, fleet, replicas, expiring, scalingGroups] = await Promise.all([
    sql<{
      workspace_id: string;
      queued: number;
      running: number;
      waiting_input: number;
      oldest: number;
      paused: boolean;
    }>`
      with q as (
        select workspace_id,
               count(*) filter (where state = 'queued')::int as queued,
               count(*) filter (where state = 'running')::int as running,
               count(*) filter (where state = 'waiting_input')::int as waiting_input,
               coalesce(extract(epoch from now() - min(created_at) filter (where state = 'queued')),
                 0)::float8 as oldest
        from jobs where state in ('queued', 'running', 'waiting_input') group by workspace_id)
      select coalesce(q.workspace_id, p.workspace_id) as workspace_id, coalesce(q.queued, 0) as
        queued, coalesce(q.running, 0) as running, coalesce(q.waiting_input, 0) as waiting_input,
             coalesce(q.oldest, 0) as oldest, p.workspace_id is not null as paused
      from q full join workspace_pauses p on p.workspace_id = q.workspace_id
      order by 1`.execute(db),
    sql<
      Record<
        | keyof RunnerCounts
        | "slots_total"
        | "slots_free"
        | "cpu_total"
        | "cpu_free"
        | "memory_total"
        | "memory_free",
        number
      >
    >`
      with h as (
        select r.*, h.leases, h.cpu as cpu_held, h.memory as memory_held
        from runners r
        cross join lateral (
          select count(*)::int as leases,
                 coalesce(sum((j.spec->>'cpu')::float8), 0) as cpu,
                 coalesce(sum((j.spec->>'memoryBytes')::int8), 0) as memory
          from leases l join jobs j on j.id = l.job_id
          where l.workspace_id = r.workspace_id and l.runner_id = r.runner_id and ${liveLeaseRow("l")}) h
      ), r as (
        select h.slots, h.cpu, h.memory_bytes, h.leases, h.cpu_held, h.memory_held,
               ${runnerState("h", sql`h.leases`, offlineSeconds)} as state
        from h
      ), s as (
        select *, state not in ('offline', 'retired') as connected, state in ('idle', 'busy') as open
        from r)
      select count(*)::int as registered,
             count(*) filter (where connected)::int as connected,
             count(*) filter (where state = 'busy')::int as busy,
             count(*) filter (where state = 'idle')::int as idle,
             count(*) filter (where state = 'paused')::int as paused,
             count(*) filter (where state = 'retired')::int as retired,
             count(*) filter (where state = 'offline')::int as offline,
             count(*) filter (where state = 'draining')::int as draining,
             coalesce(sum(slots) filter (where connected), 0)::int8 as slots_total,
             coalesce(sum(greatest(slots - leases, 0)) filter (where open), 0)::int8 as slots_free,
             coalesce(sum(cpu) filter (where connected), 0)::int8 as cpu_total,
             coalesce(sum(greatest(cpu - cpu_held, 0)) filter (where open), 0)::float8 as cpu_free,
             coalesce(sum(memory_bytes) filter (where connected), 0)::int8 as memory_total,
             coalesce(sum(greatest(memory_bytes - memory_held, 0)) filter (where open), 0)::int8
               as memory_free
      from s`.execute(db),
    db
      .selectFrom("replicas")
      .selectAll()
      .where(liveReplica)
      .orderBy("started_at")
      .orderBy("id")
      .execute(),
    sql<{ serial: string; spiffe_id: string; not_after: Date; total: number }>`
      select serial, spiffe_id, not_after, count(*) over ()::int as total
      from issued_certificates
      where not_after > now() and not_after <= now() + interval '24 hours'
      order by not_after, serial`.execute(db),
    readGroupsDemand(db, offlineSeconds),
  ]);
  const f = fleet.rows[0]!;
  return {
    workspaces: workspaces.rows.map((w) => ({
      workspaceId: w.workspace_id,
      queued: w.queued,
      running: w.running,
      waitingInput: w.waiting_input,
      oldestQueuedSeconds: w.oldest,
      paused: w.paused,
    })),
    runners: {
      registered: f.registered,
      connected: f.connected,
      busy: f.busy,
      idle: f.idle,
      paused: f.paused,
      retired: f.retired,
      offline: f.offline,
      draining: f.draining,
    },
    pool: {
      slotsTotal: f.slots_total,
      slotsFree: f.slots_free,
      cpuTotal: f.cpu_total,
      cpuFree: Math.floor(f.cpu_free),
      memoryBytesTotal: f.memory_total,
      memoryBytesFree: f.memory_free,
    },
    replicas: replicas.map((r) => ({
      id: r.id,
      host: r.host,
      pid: r.pid,
      version: r.version,
      startedAt: r.started_at,
      lastSeenAt: r.last_seen_at,
    })),
    scalingGroups,
    expiringWithin24h: expiring.rows[0]?.total ?? 0,
    expiring: expiring.rows
      .slice(0, expiringListed)
      .map((c) => ({ serial: c.serial, spiffeId: c.spiffe_id, notAfter: c.not_after })),
  };
}

/** The database's side of the status: one round trip timed, and the latest applied migration. */
export interface DatabaseFacts {
  readonly reachable: boolean;
  readonly roundTripMs: number;
  /** The latest applied migration's name; "" when it cannot be read. */
  readonly migration: string;
  /** Every applied migration's name. */
  readonly applied: readonly string[];
  /** The database's now() at the middle of the round trip, minus this process's clock, in ms. */
  readonly skewMs: number;
  /** Why it is unreachable. */
  readonly error?: string;
}

/** Times `select now()` and reads kysely's migration table; never throws. */
export async function readDatabaseFacts(db: Kysely<Database>): Promise<DatabaseFacts> {
  const started = Date.now();
  const t0 = performance.now();
  try {
    const { rows } = await sql<{ now: Date }>`select now() as now`.execute(db);
    const roundTripMs = performance.now() - t0;
    const skewMs = rows[0]!.now.getTime() - (started + roundTripMs / 2);
    // A database never migrated has no kysely_migration table: nothing applied.
    const { rows: table } = await sql<{
      present: boolean;
    }>`select to_regclass('kysely_migration') is not null as present`.execute(db);
    const applied = table[0]?.present
      ? (
          await sql<{ name: string }>`select name from kysely_migration order by name`.execute(db)
        ).rows.map((r) => r.name)
      : [];
    return { reachable: true, roundTripMs, migration: applied.at(-1) ?? "", applied, skewMs };
  } catch (err) {
    return {
      reachable: false,
      roundTripMs: performance.now() - t0,
      migration: "",
      applied: [],
      skewMs: 0,
      error: (err as Error).message,
    };
  }
}
