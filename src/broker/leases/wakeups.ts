import { sql } from "kysely";
import type { Store } from "../../store/database.js";
import { createNotifyWaiters } from "../../store/notify-waiters.js";

/** The NOTIFY channel that says "a job may be claimable in workspace <payload>". */
export const jobsChannel = "forelead_jobs";

/**
 * The NOTIFY channel that says "workspace <payload> or a runner in it was resumed": every waiter
 * there claims again.
 */
export const resumeChannel = "forelead_resume";

/**
 * Long-poll wakeups. A waiting claim arms a waiter *before* it tries to
 * claim, so a job enqueued between the try and the wait still wakes it.
 * Notifications come through Postgres LISTEN/NOTIFY, so an enqueue on one
 * replica wakes runners waiting on another (in-process on PGlite).
 *
 * One notification wakes one waiter per replica, not all of them: waking
 * every idle runner for every job made each enqueue cost a claim per waiting
 * runner (measured: 2,000 enqueues took 19-26 s with ~175 waiters, 3-5 s with
 * none). A woken waiter that claims nothing (full slots, missing labels)
 * relays the wake to the next waiter that has not tried it yet, so a job
 * still reaches any eligible runner.
 *
 * When the LISTEN connection was lost and is back, every waiter is woken
 * without a wake (as on a timeout), so each claim runs again: notifications
 * sent while it was down are lost, and a claim finds what they announced.
 *
 * Due timers: a job queued for later (runAt, delaySeconds, a retry's backoff)
 * is announced with its claimable time ("<workspace> <epoch ms>", see
 * lease-sql.ts notifyJobs), and no notification comes when it falls due. So
 * each replica keeps one timer per workspace, for the earliest due time it
 * knows; when it fires, every waiter of the workspace claims again (as on a
 * resume: several jobs may fall due at once), and the next due time is read
 * from the database (index jobs_scheduled, one probe). Read for every
 * workspace at start and after the LISTEN connection is back. Pickup of a due
 * job is then the timer's lateness plus a claim, not a poll interval.
 *
 * The direct handoff (handoff.ts): an enqueue on this replica may *reserve*
 * a waiter that is waiting now, and lease a job to its runner in the
 * enqueue's own statement. A reserved waiter stays in its queue but no
 * notification wakes it, and its wait does not end while the reservation
 * holds (its time running out, its request's abort, a recheck, close): those
 * are kept and take effect when the reservation is delivered, so a lease is
 * never made for a claim that already answered. Delivered with a lease, the
 * wait resolves with it; without, it waits on, or ends as it would have.
 */
export interface Wakeups<H = unknown, L = unknown> {
  /**
   * Arms a waiter for `workspaceId`; await `wait` for the next notification after arming. With
   * `holder` (the claim's runner), the waiter can be reserved for a handoff.
   */
  arm(workspaceId: string, holder?: H): Waiter<L>;
  /**
   * Reserves the first waiter of `workspaceId` that is waiting now and has a holder; undefined when
   * none is.
   */
  reserve(workspaceId: string): Reservation<H, L> | undefined;
  close(): Promise<void>;
}

/** A waiter reserved for a handoff: deliver exactly once (a second call does nothing). */
export interface Reservation<H, L> {
  readonly holder: H;
  /** Ends the reservation: with the lease made for it, or none. */
  deliver(lease?: L): void;
}

/** What ends a wait with a lease: the handoff made for it. */
interface Handed<L> {
  readonly lease: L;
}

/** What woke a waiter: the notification it was handed, to relay when it could not use it. */
export interface Wake {
  readonly workspaceId: string;
  /** Waiters this notification has already woken. */
  readonly tried: Set<number>;
}

/** One armed waiter. */
interface Waiter<L = unknown> {
  /**
   * Resolves with the wake, a lease handed to it, or undefined after `ms` or when `signal` aborts.
   */
  wait(ms: number, signal?: AbortSignal): Promise<Wake | Handed<L> | undefined>;
  /**
   * Disarms without waiting; a wake that arrived meanwhile and was not returned by wait() goes to
   * the next waiter.
   */
  cancel(): void;
  /** Hands an unused wake to the next waiter that has not tried it. */
  relay(wake: Wake): void;
}

/**
 * How long after a due time its timer fires; and the longest timer (a later time is re-read then).
 */
const dueSlackMs = 5;
const maxTimerMs = 3_600_000;

/** What a broker waiter is armed with: its id (for Wake.tried) and the claim's runner. */
interface Armed<H> {
  readonly id: number;
  readonly holder: H | undefined;
}

/** Subscribes to the jobs channel of `store`. */
export async function createWakeups<H = unknown, L = unknown>(
  store: Store,
): Promise<Wakeups<H, L>> {
  const waiting = createNotifyWaiters<string, Armed<H>, Wake | Handed<L>>();
  let nextId = 0;

  const wakeNext = (wake: Wake) => {
    const next = waiting.find(wake.workspaceId, (w) => !wake.tried.has(w.data.id) && !w.held);
    if (!next) return;
    wake.tried.add(next.data.id);
    next.wake(wake);
  };

  const due = new Map<string, { at: number; timer: ReturnType<typeof setTimeout> }>();
  let closed = false;
  const scheduleDue = (workspaceId: string, at: number) => {
    const known = due.get(workspaceId);
    if (closed || (known && known.at <= at)) return;
    if (known) clearTimeout(known.timer);
    // A little after the time, so the database's now() has passed it too; a far time is re-read.
    const timer = setTimeout(
      () => fireDue(workspaceId),
      Math.min(Math.max(at - Date.now(), 0) + dueSlackMs, maxTimerMs),
    );
    timer.unref();
    due.set(workspaceId, { at, timer });
  };
  const readDue = async (workspaceId?: string) => {
    const due = sql`state = 'queued' and claimable_at > created_at and claimable_at > now()`;
    // One workspace: min() without GROUP BY is one probe of jobs_scheduled (a LIMIT 1 in index
    // order).
    const { rows } =
      workspaceId === undefined
        ? await sql<{
            workspace_id: string;
            at: Date | string | null;
          }>`select workspace_id, min(claimable_at) as at from jobs where ${due} group by workspace_id`.execute(
            store.db,
          )
        : await sql<{
            workspace_id: string;
            at: Date | string | null;
          }>`select ${workspaceId}::text as workspace_id, min(claimable_at) as at from jobs where
            workspace_id = ${workspaceId} and ${due}`.execute(store.db);
    for (const row of rows)
      if (row.at !== null) scheduleDue(row.workspace_id, new Date(row.at).getTime());
  };
  // A failed read leaves that workspace without a timer until its next announcement; its waiting
  // claims still end and are made again at their long-poll's end.
  const readDueQuietly = (workspaceId?: string) => void readDue(workspaceId).catch(() => {});
  const fireDue = (workspaceId: string) => {
    due.delete(workspaceId);
    for (const waiter of waiting.armed(workspaceId)) waiter.end();
    readDueQuietly(workspaceId);
  };
  const onJobs = (payload: string) => {
    const [workspaceId = "", at] = payload.split(" ");
    if (at !== undefined) scheduleDue(workspaceId, Number(at));
    wakeNext({ workspaceId, tried: new Set() });
  };
  const unlistenJobs = await waiting.listen(store, jobsChannel, onJobs, () => {
    waiting.endAll();
    readDueQuietly();
  });
  readDueQuietly();
  // A resume may make many jobs claimable at once (and only for some runners): every waiter in the
  // workspace looks again.
  const unlistenResume = await waiting.listen(store, resumeChannel, (workspaceId) => {
    for (const waiter of waiting.armed(workspaceId)) waiter.end();
  });
  const unlisten = async () => {
    await unlistenJobs();
    await unlistenResume();
  };

  return {
    arm(workspaceId, holder) {
      const id = nextId++;
      const waiter = waiting.arm(workspaceId, { id, holder });
      let relayed = false;
      return {
        wait: (ms, signal) => waiter.wait(ms, signal),
        cancel() {
          waiter.cancel();
          // Woken while its claim was running, then done (leased another job, or gave up): the wake
          // was never used for the job it announced; pass it on, or that job waits for the next
          // enqueue.
          const woken = waiter.woken as Wake | undefined;
          if (woken && !waiter.delivered && !relayed && woken.workspaceId) {
            relayed = true;
            wakeNext(woken);
          }
        },
        relay(wake) {
          wake.tried.add(id);
          wakeNext(wake);
        },
      };
    },
    reserve(workspaceId) {
      const waiter = waiting.find(workspaceId, (w) => w.waiting && w.data.holder !== undefined);
      if (!waiter) return undefined;
      waiter.hold();
      let delivered = false;
      return {
        holder: waiter.data.holder!,
        deliver(lease) {
          if (delivered) return;
          delivered = true;
          waiter.release(lease && { lease });
        },
      };
    },
    async close() {
      closed = true;
      for (const { timer } of due.values()) clearTimeout(timer);
      due.clear();
      await unlisten();
      waiting.wakeAll({ workspaceId: "", tried: new Set() });
      waiting.clear();
    },
  };
}
