import { sql, type Kysely } from "kysely";
import type { Database } from "../store/schema.js";
import type { JobSnapshot } from "./job-snapshot.js";
import { liveLeaseRow } from "./lease-sql.js";

/** Why a queued job waits: the wire's JobWaiting (proto3 JSON names). */
export interface JobWaiting {
  readonly code: "workspace_paused" | "no_runner" | "missing_labels" | "runners_paused" | "runners_not_connected" | "all_busy";
  readonly message: string;
  readonly missingLabels?: readonly string[];
  readonly busyRunners?: number;
  readonly busySlots?: number;
}

interface RunnerFit {
  readonly runner_id: string;
  readonly slots: number;
  /** How many of the job's labels it lacks. */
  readonly missing: string[];
  readonly paused: boolean;
  /** Seen within the lease length, or holding a live lease (a busy runner renews but may not claim). */
  readonly connected: boolean;
  readonly live_leases: number;
}

/**
 * Why the queued job `job` is not running, or undefined when a registered,
 * unpaused, connected runner with the labels has a free slot (it is about
 * to be claimed). The first reason that holds, in the order an operator
 * fixes them: the workspace is paused; no runner is registered there; none
 * has the labels; every matching one is paused; none of them was seen within
 * `leaseSeconds` (the broker's lease length); every one is busy. Two
 * queries: the workspace's pause and its non-retired runners, each with the
 * labels it lacks and its live leases (the live-lease rule of lease-sql.ts).
 */
export async function jobWaiting(db: Kysely<Database>, job: JobSnapshot, leaseSeconds: number): Promise<JobWaiting | undefined> {
  if (job.state !== "queued") return undefined;
  const workspaceId = String(job.workspaceId);
  const labels = (job.labels as string[] | undefined) ?? [];
  const [pause, runners] = await Promise.all([
    db.selectFrom("workspace_pauses").select(["paused_at", "paused_by", "reason"]).where("workspace_id", "=", workspaceId).executeTakeFirst(),
    sql<RunnerFit>`
      select r.runner_id, r.slots, r.paused_at is not null as paused,
        array(select x from unnest(${labels}::text[]) x where not x = any(r.labels) order by x) as missing,
        live.n as live_leases,
        r.last_seen_at > now() - make_interval(secs => ${leaseSeconds}) or live.n > 0 as connected
      from runners r
      cross join lateral (select count(*)::int as n from leases l where l.workspace_id = r.workspace_id and l.runner_id = r.runner_id and ${liveLeaseRow("l")}) live
      where r.workspace_id = ${workspaceId} and r.retired_at is null
      order by r.runner_id`.execute(db).then((r) => r.rows),
  ]);
  const ws = JSON.stringify(workspaceId);
  if (pause) {
    const why = pause.reason ? ` (${pause.reason})` : "";
    return { code: "workspace_paused", message: `workspace ${ws} is paused since ${new Date(pause.paused_at).toISOString()} by ${pause.paused_by}${why}: its queued jobs are not claimed; resume it (POST /v1/admin/workspaces/${workspaceId}/resume) to let runners take them` };
  }
  if (runners.length === 0) {
    return { code: "no_runner", message: `no runner is registered in workspace ${ws}: enroll one there (forelead runner enroll with a grant for ${ws}), or check the job's workspaceId for a typo` };
  }
  const matching = runners.filter((r) => r.missing.length === 0);
  if (matching.length === 0) {
    const closest = runners.reduce((best, r) => (r.missing.length < best.missing.length ? r : best));
    const missing = closest.missing.join(",");
    return {
      code: "missing_labels",
      message: `no runner in workspace ${ws} has labels ${labels.join(",")}; the closest, ${JSON.stringify(closest.runner_id)}, lacks ${missing}: register one with --labels including ${missing}, or drop the label from the job`,
      missingLabels: closest.missing,
    };
  }
  const unpaused = matching.filter((r) => !r.paused);
  if (unpaused.length === 0) {
    return { code: "runners_paused", message: `every runner in workspace ${ws} with the job's labels is paused (${matching.map((r) => r.runner_id).join(", ")}); resume one (POST /v1/admin/runners/{runnerId}/resume)` };
  }
  const connected = unpaused.filter((r) => r.connected);
  if (connected.length === 0) {
    return { code: "runners_not_connected", message: `runners in workspace ${ws} have the job's labels (${unpaused.map((r) => r.runner_id).join(", ")}) but none was seen in the last ${leaseSeconds} s: start one, or check its network and certificate (its log says why it cannot reach the control plane)` };
  }
  if (connected.every((r) => r.live_leases >= r.slots)) {
    const busySlots = connected.reduce((n, r) => n + r.slots, 0);
    return {
      code: "all_busy",
      message: `all ${connected.length} matching runner${connected.length === 1 ? "" : "s"} in workspace ${ws} are busy (${busySlots} slot${busySlots === 1 ? "" : "s"} in use); the job runs when one frees a slot, or add a runner or slots`,
      busyRunners: connected.length,
      busySlots,
    };
  }
  return undefined;
}

/** The snapshot with its `waiting` set when the job is queued and waits for a reason. */
export async function withWaiting(db: Kysely<Database>, job: JobSnapshot, leaseSeconds: number): Promise<JobSnapshot> {
  const waiting = await jobWaiting(db, job, leaseSeconds);
  return waiting ? { ...job, waiting } : job;
}
