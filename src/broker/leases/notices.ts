import { Code, ConnectError } from "@connectrpc/connect";
import { sql, type RawBuilder } from "kysely";
import type { Store } from "../../store/database.js";
import { createNotifyWaiters } from "../../store/notify-waiters.js";
import type { LeaseHolder } from "./check.js";
import { liveLease } from "./sql-fragments.js";

/**
 * The NOTIFY channel that says "runner <payload> has a notice": the payload is
 * `json_build_array(workspace_id, runner_id)`.
 */
const noticesChannel = "forelead_runner_notices";

/** Longest a watch may wait for a notice, in seconds (as a claim's long poll). */
const maxWatchWaitSeconds = 20;

/** Most job ids a watch may say it already knows: more than any runner's live leases. */
const maxKnownJobIds = 1024;

/** One thing a runner should act on now (RunnerNotice). */
export interface RunnerNoticeView {
  /** "cancel": the job was cancelled while the runner holds its lease. */
  readonly kind: "cancel";
  readonly jobId: string;
}

/**
 * A runner's watch: the long poll a runner keeps open while it holds leases,
 * answered as soon as it has a notice. A cancel reaches the runner through
 * it at once, instead of at its next renewal (up to a third of the lease
 * length later); renewals still carry `cancelRequested`, the fallback for a
 * runner that never watches or whose watch was down.
 *
 * The rule is the wakeups' (notify-waiters.ts): the waiter is armed before
 * the read, so a cancel committed after the read ends the wait. The cancel
 * statement NOTIFYs in its own transaction (noticeNotify), so a cancel made
 * through any replica wakes the watch on every replica (in-process on
 * PGlite). The read is the truth, the notification only says "read again".
 */
export interface RunnerNotices {
  /**
   * The notices for `holder` now, or the first to come within `waitSeconds`; none when the time
   * ran out, `signal` aborted, or the broker is closing. `knownJobIds` are left out.
   */
  watch(
    holder: LeaseHolder,
    waitSeconds: number,
    knownJobIds: readonly string[],
    signal?: AbortSignal,
  ): Promise<RunnerNoticeView[]>;
  /**
   * Answers every open watch now, with no notices, and each later one at once: what a closing
   * listener calls so that open watches do not hold its sessions open.
   */
  end(): void;
  close(): Promise<void>;
}

/** The waiters' key of one runner: the same text for the payload parsed and the holder. */
function runnerKey(workspaceId: string, runnerId: string): string {
  return JSON.stringify([workspaceId, runnerId]);
}

/**
 * `pg_notify` on the notices channel for the runner of the jobs row `alias`: what a statement that
 * makes a notice for a running job's runner sends in its own transaction.
 */
export function noticeNotify(alias: string): RawBuilder<unknown> {
  const t = sql.ref(alias);
  return sql`pg_notify(${noticesChannel}, json_build_array(${t}.workspace_id,
    ${t}.runner_id)::text)`;
}

/** Refuses a watch's waitSeconds or known job ids out of range (invalid_argument). */
function checkWatchRequest(waitSeconds: number, knownJobIds: readonly string[]): void {
  if (!Number.isInteger(waitSeconds) || waitSeconds < 0 || waitSeconds > maxWatchWaitSeconds)
    throw new ConnectError(
      `waitSeconds must be 0 to ${maxWatchWaitSeconds}; got ${waitSeconds}`,
      Code.InvalidArgument,
    );
  if (knownJobIds.length > maxKnownJobIds)
    throw new ConnectError(
      `knownJobIds may name at most ${maxKnownJobIds} jobs; got ${knownJobIds.length}`,
      Code.InvalidArgument,
    );
}

/** Subscribes to the notices channel of `store`. */
export async function createRunnerNotices(store: Store): Promise<RunnerNotices> {
  const { db } = store;
  const waiters = createNotifyWaiters<string, undefined, true>();
  const unlisten = await waiters.listen(store, noticesChannel, (payload) => {
    const [workspaceId, runnerId] = JSON.parse(payload) as [string, string];
    for (const waiter of waiters.armed(runnerKey(workspaceId, runnerId))) waiter.wake(true);
  });
  let closed = false;
  const end = () => {
    closed = true;
    waiters.endAll();
  };

  // The holder's running jobs whose cancel was asked, under a live lease (jobs_workspace_state_created
  // finds the workspace's running jobs).
  const read = async (holder: LeaseHolder, knownJobIds: readonly string[]) => {
    const { rows } = await sql<{ id: string }>`
      select id from jobs where ${liveLease(holder)} and cancel_requested
        and not (id::text = any(${knownJobIds}::text[]))
      order by id`.execute(db);
    return rows.map((r): RunnerNoticeView => ({ kind: "cancel", jobId: r.id }));
  };

  return {
    async watch(holder, waitSeconds, knownJobIds, signal) {
      checkWatchRequest(waitSeconds, knownJobIds);
      const deadline = Date.now() + waitSeconds * 1000;
      for (;;) {
        const waiter = waiters.arm(runnerKey(holder.workspaceId, holder.runnerId), undefined);
        try {
          const notices = await read(holder, knownJobIds);
          if (notices.length || closed || signal?.aborted || Date.now() >= deadline) return notices;
          if (!(await waiter.wait(deadline - Date.now(), signal))) return [];
        } finally {
          waiter.cancel();
        }
      }
    },
    end,
    async close() {
      end();
      await unlisten();
    },
  };
}
