import { sql, type Transaction } from "kysely";
import { liveLease } from "../broker/leases/sql-fragments.js";
import type { Database, InventoryProblem } from "../store/schema.js";
import type { InventoryItem } from "./report.js";

/** A runner, as its certificate names it: the workspace never comes from a body. */
export interface InventoryHolder {
  readonly workspaceId: string;
  readonly runnerId: string;
}

/** Something in a report an operator should look at. */
export interface InventoryFlag {
  readonly problem: InventoryProblem;
  readonly jobId: string;
  /** The item, for item flags; undefined for lease_without_container. */
  readonly kind: string | undefined;
  readonly name: string | undefined;
  readonly message: string;
}

/**
 * How long after this runner's lease on a job ended its resources may still
 * be listed without being called orphan: the runner removes them after the
 * job ends, and reports every ~15 s. Past this, a resource the runner still
 * claims for a job it no longer holds is worth an operator's look.
 */
const cleanupGraceSeconds = 300;

/**
 * How long after a claim a live lease may have no container yet: the runner
 * pulls the image and creates the network first. Past this, a live lease
 * with no container means the runner holds a job it is not running.
 */
const startGraceSeconds = 120;

interface JobFacts {
  id: string;
  state: string;
  runner_id: string | null;
  live_here: boolean;
  live_until: Date | null;
  last_here_end: Date | null;
}

/**
 * Checks a report against the leases, as of now() in the report's
 * transaction, and returns what to flag. The rules (chosen to flag only what
 * needs a person; normal churn is not flagged):
 *
 * * an item the runner does NOT call orphan, whose job this runner holds no
 *   live lease on → job_not_leased_here, unless this runner's last lease on
 *   that job ended less than cleanupGraceSeconds ago (normal cleanup);
 * * an item the runner calls orphan, whose job this runner holds a live lease
 *   on → orphan_of_live_lease (the runner and the control plane disagree
 *   about a running job; reaping it would kill that job). An orphan of a job
 *   that is not live here is what an orphan is: not flagged;
 * * a live lease of this runner issued more than startGraceSeconds ago with
 *   no container the runner does not call orphan → lease_without_container.
 *
 * A runner that executes jobs without containers (the process executor)
 * should not send inventory reports, or every lease of it is flagged.
 */
export async function crossCheck(
  tx: Transaction<Database>,
  holder: InventoryHolder,
  items: readonly InventoryItem[],
): Promise<InventoryFlag[]> {
  const flags: InventoryFlag[] = [];
  const jobIds = [...new Set(items.map((i) => i.jobId))];
  const jobs = new Map<string, JobFacts>();
  if (jobIds.length > 0) {
    // One read for every job the report names, with this runner's most recent lease end on it
    // (an open lease that already expired counts as ended at its expiry).
    const { rows } = await sql<JobFacts>`
      select j.id, j.state, j.runner_id,
             (${liveLease({ runnerId: holder.runnerId }, "j")}) as live_here,
             j.lease_expires_at as live_until,
             (select max(coalesce(l.ended_at, l.expires_at)) from leases l
               where l.job_id = j.id and l.workspace_id = ${holder.workspaceId} and l.runner_id
                 = ${holder.runnerId}) as last_here_end
      from jobs j
      where j.workspace_id = ${holder.workspaceId} and j.id = any(${jobIds}::uuid[])`.execute(tx);
    for (const row of rows) jobs.set(row.id, row);
  }
  const { rows: nowRows } = await sql<{ now: Date }>`select now() as now`.execute(tx);
  const now = nowRows[0]!.now.getTime();

  for (const item of items) {
    const job = jobs.get(item.jobId);
    const what = `${item.kind} ${item.name}`;
    const flag = (problem: InventoryProblem, message: string) =>
      flags.push({ problem, jobId: item.jobId, kind: item.kind, name: item.name, message });
    if (item.orphan) {
      if (job?.live_here)
        flag(
          "orphan_of_live_lease",
          `${what} is called orphan, but this runner holds a live lease on job ` +
            `${item.jobId} (until ${iso(job.live_until)}); reaping it would stop ` +
            `that job`,
        );
      continue;
    }
    if (job?.live_here) continue;
    if (job?.last_here_end && now - job.last_here_end.getTime() < cleanupGraceSeconds * 1000)
      continue;
    flag(
      "job_not_leased_here",
      `${what} is not called orphan, but ${notLeasedHere(holder, item.jobId, job)}`,
    );
  }

  // Live leases of this runner old enough to have a container by now.
  const { rows: leases } = await sql<{ job_id: string; issued_at: Date }>`
    select j.id as job_id, l.issued_at
    from jobs j join leases l on l.id = j.lease_id
    where ${liveLease({ workspaceId: holder.workspaceId, runnerId: holder.runnerId }, "j")}
      and l.issued_at < now() - make_interval(secs => ${startGraceSeconds})`.execute(tx);
  const running = new Set(
    items.filter((i) => i.kind === "container" && !i.orphan).map((i) => i.jobId),
  );
  for (const lease of leases) {
    if (running.has(lease.job_id)) continue;
    flags.push({
      problem: "lease_without_container",
      jobId: lease.job_id,
      kind: undefined,
      name: undefined,
      message:
        `this runner holds a live lease on job ${lease.job_id} (claimed at ` +
        `${iso(lease.issued_at)}) but reports no container for it that it does ` +
        `not call orphan`,
    });
  }
  return flags;
}

function notLeasedHere(holder: InventoryHolder, jobId: string, job: JobFacts | undefined): string {
  if (!job) return `job ${jobId} is not a job of workspace "${holder.workspaceId}"`;
  const last = job.last_here_end
    ? `this runner's last lease on it ended at ${iso(job.last_here_end)}`
    : "this runner never held a lease on it";
  if (job.state === "running" && job.runner_id !== holder.runnerId)
    return `job ${jobId} is leased to runner "${job.runner_id}", not to this one; ${last}`;
  return `job ${jobId} is ${job.state} and not leased to this runner; ${last}`;
}

function iso(d: Date | null): string {
  return d ? d.toISOString() : "(unknown time)";
}
