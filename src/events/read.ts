import { Code, ConnectError } from "@connectrpc/connect";
import { sql, type Kysely } from "kysely";
import type { Database } from "../store/schema.js";
import { eventTypes } from "./record.js";

/** One event as the stream delivers it. */
export interface EventEntry {
  readonly id: number;
  readonly at: Date;
  readonly type: string;
  readonly workspaceId: string | null;
  readonly runnerId: string | null;
  readonly jobId: string | null;
  readonly data: Record<string, unknown>;
}

/** Which events a reader wants, after which id. */
export interface EventQuery {
  readonly workspaceId: string;
  readonly types: readonly string[];
  /** The last id the reader has (0: from the oldest kept). */
  readonly afterId: number;
  /** Most events in one page; 0 for the default. */
  readonly pageSize: number;
}

/** Page sizes: 1000 by default, at most 10,000. */
const eventPageLimits = { defaultSize: 1000, maxSize: 10_000 } as const;

/** Checks a query; throws invalid_argument naming the first bad field. */
export function checkEventQuery(q: EventQuery): EventQuery {
  const bad = (message: string): never => {
    throw new ConnectError(message, Code.InvalidArgument);
  };
  if (!Number.isSafeInteger(q.afterId) || q.afterId < 0)
    bad(`afterId must be an event id (a whole number, 0 for the oldest kept); got ${q.afterId}`);
  if (q.pageSize < 0 || q.pageSize > eventPageLimits.maxSize)
    bad(
      `pageSize must be 1 to ${eventPageLimits.maxSize} (0 means ${eventPageLimits.defaultSize}); got ${q.pageSize}`,
    );
  q.types.forEach(
    (t, i) =>
      (eventTypes as readonly string[]).includes(t) ||
      bad(
        `types[${i}] ${JSON.stringify(t.slice(0, 60))} is not an event type; one of ${eventTypes.join(", ")}`,
      ),
  );
  if (q.workspaceId.length > 200) bad("workspaceId is longer than 200 characters");
  return { ...q, pageSize: q.pageSize || eventPageLimits.defaultSize };
}

/**
 * Where a reader is: the last id it delivered, every id up to `finalThrough`
 * known to be final (present or never to be), and an open gap's check.
 *
 * Ids come from a sequence, taken before commit, so a transaction holding id
 * 10 may commit after the one holding 11: a reader that moved past 11 would
 * never see 10. So a reader delivers ids in order and stops at a gap. Every
 * event writer has its transaction id before it takes an event id (the
 * column order of the events table, and each writer changes another row first),
 * and the transaction holding a missing id took it before the visible id
 * above it was taken and committed, so it was in flight at the read: the
 * gap is final once every transaction in flight at that read (the xip list
 * of its snapshot) has ended, and then those in flight at a second read
 * (see readEvents). Then a still-missing id is a rolled-back write, and is
 * skipped.
 */
export interface ReadPosition {
  readonly afterId: number;
  readonly finalThrough: number;
  /**
   * The snapshot of the read that found a gap below `through`, while it is
   * open; `confirming` once the transactions of the first snapshot ended and
   * those of a second one, taken then, are awaited too.
   */
  readonly gap?: {
    readonly snapshot: string;
    readonly through: number;
    readonly confirming?: boolean;
  };
}

interface Row {
  snapshot: string;
  gap_closed: boolean;
  id: number | string | null;
  at: Date | null;
  type: string | null;
  workspace_id: string | null;
  runner_id: string | null;
  job_id: string | null;
  data: Record<string, unknown> | null;
}

/**
 * Reads the events after `pos`, in one statement: rows with greater ids, the
 * statement's snapshot, and whether the open gap's transactions have all
 * ended as of that same snapshot. Returns the events deliverable in order
 * (filtered by `q`) and the position after them; `open` when a gap holds
 * back what follows it.
 */
export async function readEvents(
  db: Kysely<Database>,
  q: EventQuery,
  pos: ReadPosition,
): Promise<{ entries: EventEntry[]; pos: ReadPosition; full: boolean; open: boolean }> {
  const { rows } = await sql<Row>`
    select s.snapshot, s.gap_closed, e.id, e.at, e.type, e.workspace_id, e.runner_id, e.job_id::text as job_id, e.data
    from (
      select pg_current_snapshot()::text as snapshot,
        coalesce((select bool_and(pg_visible_in_snapshot(x, pg_current_snapshot())) from
          pg_snapshot_xip(${pos.gap?.snapshot ?? null}::pg_snapshot) x), true) as gap_closed
    ) s
    left join lateral (select * from events where id > ${pos.afterId} order by id limit ${q.pageSize}) e on true
    order by e.id`.execute(db);
  const snapshot = rows[0]!.snapshot;
  let finalThrough = pos.finalThrough;
  let gap = pos.gap;
  if (gap && rows[0]!.gap_closed) {
    if (gap.confirming) {
      finalThrough = Math.max(finalThrough, gap.through);
      gap = undefined;
    } else {
      // Seen once (CI, Postgres, Node 24): an id held by a transaction that was not in the first
      // snapshot's list, so the rule's "transaction id before event id" did not hold for it. The
      // gap waits for the transactions in flight at a second snapshot as well (one recheck more)
      // before a missing id counts as rolled back; an event that commits meanwhile is delivered in
      // order.
      gap = { snapshot, through: gap.through, confirming: true };
    }
  }
  let afterId = pos.afterId;
  const entries: EventEntry[] = [];
  const present = rows.filter((r) => r.id !== null);
  for (const r of present) {
    const id = Number(r.id);
    if (id !== afterId + 1 && id > finalThrough + 1) {
      // A gap below id: held back until the transactions in flight now have ended.
      gap ??= { snapshot, through: Number(present[present.length - 1]!.id) };
      return { entries, pos: { afterId, finalThrough, gap }, full: false, open: true };
    }
    afterId = id;
    if (q.workspaceId && r.workspace_id !== q.workspaceId) continue;
    if (q.types.length && !q.types.includes(r.type!)) continue;
    entries.push({
      id,
      at: r.at!,
      type: r.type!,
      workspaceId: r.workspace_id,
      runnerId: r.runner_id,
      jobId: r.job_id,
      data: r.data ?? {},
    });
  }
  return {
    entries,
    pos: {
      afterId,
      finalThrough: Math.max(finalThrough, afterId),
      gap: gap && gap.through > afterId ? gap : undefined,
    },
    full: present.length === q.pageSize,
    open: false,
  };
}
