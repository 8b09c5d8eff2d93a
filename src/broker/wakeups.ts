import { sql } from "kysely";
import type { Store } from "../store/database.js";

/** The NOTIFY channel that says "a job may be claimable in workspace <payload>". */
export const jobsChannel = "forelead_jobs";

/**
 * The NOTIFY channel that names the job (payload: its id) of a single enqueue, sent just before that
 * enqueue's notification on jobsChannel in the same statement: see `sending`.
 */
export const namedJobChannel = "forelead_job";

/** The NOTIFY channel that says "workspace <payload> or a runner in it was resumed": every waiter there claims again. */
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
 * A job this replica enqueues alone, that a runner can take now, wakes a
 * waiter as its statement's reply comes (`sending`, `sent`), not when its
 * notification comes back through Postgres' listening backend, one process
 * hop later (the early wake). Its notification then wakes no one. Which
 * notification is its own: the statement sends one on namedJobChannel with
 * the job's id just before the usual one; a transaction's notifications are
 * delivered in the order sent and never interleaved with another's, so the
 * jobs notification right after the named one is the job's. When the named
 * one comes before the reply (the listening connection won the race, and
 * always on PGlite, whose notifications come within the reply), the usual
 * notification has already woken a waiter, and there is no early wake.
 * (Absorbing "the next notification of the workspace" instead, without the
 * name, lost another job's wake whenever the notification came first:
 * docs/performance.md, pickup latency.) Every wake stays one wake per job,
 * relayed as before; only its time moves.
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
 */
export interface Wakeups {
  /** Arms a waiter for `workspaceId`; await `wait` for the next notification after arming. */
  arm(workspaceId: string): Waiter;
  /** An enqueue of the one job `jobId` is about to be sent: its reply may come before or after its notifications. */
  sending(jobId: string): void;
  /**
   * That enqueue ended: `claimable` when it stored the job and a runner can take it now (the
   * enqueue's runnableNow probe); false when it failed, stored nothing or the job must wait.
   */
  sent(workspaceId: string, jobId: string, claimable: boolean): void;
  close(): Promise<void>;
}

/** What woke a waiter: the notification it was handed, to relay when it could not use it. */
export interface Wake {
  readonly workspaceId: string;
  /** Waiters this notification has already woken. */
  readonly tried: Set<number>;
}

/** One armed waiter. */
export interface Waiter {
  /** Resolves with the wake, or undefined after `ms` or when `signal` aborts. */
  wait(ms: number, signal?: AbortSignal): Promise<Wake | undefined>;
  /** Disarms without waiting; a wake that arrived meanwhile and was not returned by wait() goes to the next waiter. */
  cancel(): void;
  /** Hands an unused wake to the next waiter that has not tried it. */
  relay(wake: Wake): void;
}

/**
 * How long an early wake waits for its job's named notification. Longer than LISTEN takes; one that
 * never comes (LISTEN was down) is forgotten after this.
 */
const earlyWakeMs = 5_000;

/** How long after a due time its timer fires; and the longest timer (a later time is re-read then). */
const dueSlackMs = 5;
const maxTimerMs = 3_600_000;

interface Armed {
  readonly id: number;
  readonly wake: (w: Wake) => void;
  /** Ends the wait (or the next one) with no wake: the claim looks again. */
  readonly recheck: () => void;
}

/** Subscribes to the jobs channel of `store`. */
export async function createWakeups(store: Store): Promise<Wakeups> {
  const waiting = new Map<string, Armed[]>();
  let nextId = 0;

  /** Wakes the next waiter of the workspace that has not tried `wake`; false when there is none. */
  const wakeNext = (wake: Wake): boolean => {
    const queue = waiting.get(wake.workspaceId);
    const i = queue?.findIndex((a) => !wake.tried.has(a.id)) ?? -1;
    if (!queue || i === -1) return false;
    const [armed] = queue.splice(i, 1);
    if (queue.length === 0) waiting.delete(wake.workspaceId);
    wake.tried.add(armed!.id);
    armed!.wake(wake);
    return true;
  };

  /** Enqueues of one job sent and not yet answered: whether the job's named notification came meanwhile. */
  const inFlight = new Map<string, { named: boolean }>();
  /** Jobs woken early, by id: their workspace, and until when their named notification is expected. */
  const wokenEarly = new Map<string, { workspaceId: string; until: number }>();
  /** The workspace whose next jobs notification is the one of a job woken early: it wakes no one. */
  let absorbNext: string | undefined;
  const onNamedJob = (jobId: string) => {
    const pending = inFlight.get(jobId);
    if (pending) pending.named = true;
    const early = wokenEarly.get(jobId);
    if (early) {
      wokenEarly.delete(jobId);
      absorbNext = early.workspaceId;
    }
  };
  const forgetEarly = () => {
    absorbNext = undefined;
    wokenEarly.clear();
    for (const pending of inFlight.values()) pending.named = true; // their notifications may be lost: no early wake
  };

  const recheckAll = () => {
    // A copy: an ended wait disarms itself, taking its waiter out of the queue.
    for (const armed of [...waiting.values()].flat()) armed.recheck();
  };
  const due = new Map<string, { at: number; timer: ReturnType<typeof setTimeout> }>();
  let closed = false;
  const scheduleDue = (workspaceId: string, at: number) => {
    const known = due.get(workspaceId);
    if (closed || (known && known.at <= at)) return;
    if (known) clearTimeout(known.timer);
    // A little after the time, so the database's now() has passed it too; a far time is re-read.
    const timer = setTimeout(() => fireDue(workspaceId), Math.min(Math.max(at - Date.now(), 0) + dueSlackMs, maxTimerMs));
    timer.unref();
    due.set(workspaceId, { at, timer });
  };
  const readDue = async (workspaceId?: string) => {
    const due = sql`state = 'queued' and claimable_at > created_at and claimable_at > now()`;
    // One workspace: min() without GROUP BY is one probe of jobs_scheduled (a LIMIT 1 in index order).
    const { rows } = workspaceId === undefined
      ? await sql<{ workspace_id: string; at: Date | string | null }>`select workspace_id, min(claimable_at) as at from jobs where ${due} group by workspace_id`.execute(store.db)
      : await sql<{ workspace_id: string; at: Date | string | null }>`select ${workspaceId}::text as workspace_id, min(claimable_at) as at from jobs where workspace_id = ${workspaceId} and ${due}`.execute(store.db);
    for (const row of rows) if (row.at !== null) scheduleDue(row.workspace_id, new Date(row.at).getTime());
  };
  // A failed read leaves that workspace without a timer until its next announcement; its waiting
  // claims still end and are made again at their long-poll's end.
  const readDueQuietly = (workspaceId?: string) => void readDue(workspaceId).catch(() => {});
  const fireDue = (workspaceId: string) => {
    due.delete(workspaceId);
    for (const armed of [...(waiting.get(workspaceId) ?? [])]) armed.recheck();
    readDueQuietly(workspaceId);
  };
  const onJobs = (payload: string) => {
    const [workspaceId = "", at] = payload.split(" ");
    const served = absorbNext === workspaceId && at === undefined;
    absorbNext = undefined;
    if (at !== undefined) scheduleDue(workspaceId, Number(at));
    if (!served) wakeNext({ workspaceId, tried: new Set() });
  };
  const unlistenJobs = await store.listen(jobsChannel, onJobs, () => {
    forgetEarly();
    recheckAll();
    readDueQuietly();
  });
  // After jobsChannel: a named notification LISTENed before its jobs one could set absorbNext with
  // nothing to absorb. A reconnect LISTENs the channels in this order too.
  const unlistenNamed = await store.listen(namedJobChannel, onNamedJob, forgetEarly);
  readDueQuietly();
  // A resume may make many jobs claimable at once (and only for some runners): every waiter in the workspace looks again.
  const unlistenResume = await store.listen(resumeChannel, (workspaceId) => {
    for (const armed of [...(waiting.get(workspaceId) ?? [])]) armed.recheck();
  });
  const unlisten = async () => {
    await unlistenJobs();
    await unlistenNamed();
    await unlistenResume();
  };

  return {
    arm(workspaceId) {
      const id = nextId++;
      let woken: Wake | undefined;
      let rechecked = false;
      let resolveWait: ((w: Wake | undefined) => void) | undefined;
      const armed: Armed = {
        id,
        wake: (w) => {
          woken = w;
          resolveWait?.(w);
        },
        recheck: () => {
          rechecked = true;
          resolveWait?.(undefined);
        },
      };
      const queue = waiting.get(workspaceId) ?? [];
      queue.push(armed);
      waiting.set(workspaceId, queue);
      const disarm = () => {
        const q = waiting.get(workspaceId);
        const i = q?.indexOf(armed) ?? -1;
        if (q && i !== -1) q.splice(i, 1);
        if (q && q.length === 0) waiting.delete(workspaceId);
      };
      // Whether wait() handed the wake to the claim loop, which then relays it itself if unused.
      let delivered = false;
      return {
        wait(ms, signal) {
          if (woken || rechecked || ms <= 0 || signal?.aborted) {
            disarm();
            delivered = woken !== undefined;
            return Promise.resolve(woken);
          }
          return new Promise((resolve) => {
            const done = (w: Wake | undefined) => {
              delivered = w !== undefined;
              clearTimeout(timer);
              signal?.removeEventListener("abort", aborted);
              disarm();
              resolve(w);
            };
            const aborted = () => done(undefined);
            const timer = setTimeout(() => done(undefined), ms);
            signal?.addEventListener("abort", aborted, { once: true });
            resolveWait = done;
          });
        },
        cancel() {
          disarm();
          // Woken while its claim was running, then done (leased another job, or gave up): the
          // wake was never used for the job it announced; pass it on, or that job waits for the next enqueue.
          if (woken && !delivered && woken.workspaceId) {
            delivered = true;
            wakeNext(woken);
          }
        },
        relay(wake) {
          wake.tried.add(id);
          wakeNext(wake);
        },
      };
    },
    sending(jobId) {
      if (!closed) inFlight.set(jobId, { named: false });
    },
    sent(workspaceId, jobId, claimable) {
      const pending = inFlight.get(jobId);
      inFlight.delete(jobId);
      if (!pending || pending.named || !claimable || closed) return;
      const now = Date.now();
      for (const [id, early] of wokenEarly) if (early.until < now) wokenEarly.delete(id);
      // No waiter: the job's notification wakes the next one armed, as without an early wake.
      if (wakeNext({ workspaceId, tried: new Set() })) wokenEarly.set(jobId, { workspaceId, until: now + earlyWakeMs });
    },
    async close() {
      closed = true;
      for (const { timer } of due.values()) clearTimeout(timer);
      due.clear();
      await unlisten();
      for (const armed of [...waiting.values()].flat()) armed.wake({ workspaceId: "", tried: new Set() });
      waiting.clear();
    },
  };
}
