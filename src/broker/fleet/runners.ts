import type { Kysely } from "kysely";
import type { Database } from "../../store/schema.js";
import { liveLeaseCount, runnerState, type RunnerState } from "./state.js";

/** A registration with its live lease count, for operators. */
export interface RunnerView {
  readonly runnerId: string;
  readonly workspaceId: string;
  readonly slots: number;
  readonly cpu: number;
  readonly memoryBytes: number;
  readonly architecture: string;
  readonly labels: readonly string[];
  readonly clockOffsetNs: number;
  readonly os: string;
  readonly executionKinds: readonly string[];
  readonly features: readonly string[];
  readonly maxConcurrency: number;
  readonly liveLeases: number;
  readonly registeredAt: Date;
  readonly lastSeenAt: Date;
  readonly retiredAt: Date | null;
  /** Set while paused (pauses.ts), with who paused it. */
  readonly pausedAt: Date | null;
  readonly pausedBy: string | null;
  /** forelead_runner_state: idle, busy, paused, draining, offline or retired. */
  readonly state: RunnerState;
  /** The runner's version as it said at register; '' when it sent none. */
  readonly version: string;
}

/**
 * Registered runners, optionally of one workspace, with their live leases and state (offline after
 * `offlineSeconds` of silence).
 */
export async function listRunners(
  db: Kysely<Database>,
  workspaceId: string,
  offlineSeconds: number,
): Promise<RunnerView[]> {
  const liveLeases = liveLeaseCount("r");
  let query = db
    .selectFrom("runners as r")
    .selectAll("r")
    .select(liveLeases.as("live_leases"))
    .select(runnerState("r", liveLeases, offlineSeconds).as("state"))
    .orderBy("r.workspace_id")
    .orderBy("r.runner_id");
  if (workspaceId) query = query.where("r.workspace_id", "=", workspaceId);
  const rows = await query.execute();
  return rows.map((r) => ({
    runnerId: r.runner_id,
    workspaceId: r.workspace_id,
    slots: r.slots,
    cpu: r.cpu,
    memoryBytes: r.memory_bytes,
    architecture: r.architecture,
    labels: r.labels,
    clockOffsetNs: r.clock_offset_ns,
    os: r.os,
    executionKinds: r.execution_kinds,
    features: r.features,
    maxConcurrency: r.max_concurrency,
    liveLeases: r.live_leases,
    registeredAt: r.registered_at,
    lastSeenAt: r.last_seen_at,
    retiredAt: r.retired_at,
    pausedAt: r.paused_at,
    pausedBy: r.paused_by,
    state: r.state,
    version: r.version,
  }));
}
