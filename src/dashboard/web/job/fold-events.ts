// The Job page's events table, kept readable however many events a job sends: a run of events of
// one type in a row (a job's progress, its own steps) is one row counting them, and only the newest
// rows are shown until the reader asks for all.

/** One event as the Job page holds it. */
export interface TableEvent {
  readonly position: string;
  readonly attempt: number;
  readonly type: string;
}

/** A run of consecutive events of one type and attempt: the newest stands for the run. */
export interface FoldedRow<E extends TableEvent> {
  /** The newest event of the run. */
  readonly last: E;
  /** How many events the run holds (1: an ordinary row). */
  readonly count: number;
}

/** How many rows the table shows before "show all". */
const shownEventRows = 50;

/** Folds runs of consecutive events with the same type and attempt into one row each, in order. */
export function foldEvents<E extends TableEvent>(events: readonly E[]): FoldedRow<E>[] {
  const rows: FoldedRow<E>[] = [];
  for (const e of events) {
    const prev = rows.at(-1);
    if (prev && prev.last.type === e.type && prev.last.attempt === e.attempt)
      rows[rows.length - 1] = { last: e, count: prev.count + 1 };
    else rows.push({ last: e, count: 1 });
  }
  return rows;
}

/** The rows shown: all of them, or the newest `limit`, with how many are hidden. */
export function newestRows<R>(
  rows: readonly R[],
  all: boolean,
  limit = shownEventRows,
): { readonly shown: readonly R[]; readonly hidden: number } {
  if (all || rows.length <= limit) return { shown: rows, hidden: 0 };
  return { shown: rows.slice(rows.length - limit), hidden: rows.length - limit };
}
