/**
 * A job's progress as people read it (docs/job-contract.md, "Progress"): the one rule of how a
 * percent or a done/total count is shown, used by the CLI, the dashboard and the runner (which
 * sends a value only when this text changes).
 */

/** A progress as the job view carries it: a percent, a done/total count, or both. */
export interface ProgressFigures {
  readonly percent?: number;
  readonly done?: number;
  readonly total?: number;
}

/** How far, 0 to 100: the percent when there is one, else done of total; undefined: unknown. */
export function progressPercent(p: ProgressFigures): number | undefined {
  if (p.percent !== undefined) return Math.min(100, Math.max(0, p.percent));
  if (p.done !== undefined && p.total !== undefined && p.total > 0)
    return Math.min(100, (100 * p.done) / p.total);
  return undefined;
}

/**
 * "42%", "3/10 (30%)", "3 done" — or "" when the figures say nothing. A job's own percent is shown
 * as it wrote it, so two different values never read the same.
 */
export function progressText(p: ProgressFigures): string {
  const percent = progressPercent(p);
  const shown = percent === undefined ? "" : `${p.percent ?? Number(percent.toFixed(1))}%`;
  if (p.done !== undefined && p.total !== undefined) return `${p.done}/${p.total} (${shown})`;
  if (p.done !== undefined) return shown ? `${p.done} done (${shown})` : `${p.done} done`;
  return shown;
}

/** The figures of a job.progress event's data: only its finite numbers; undefined if none. */
export function progressFiguresOf(data: unknown): ProgressFigures | undefined {
  if (!data || typeof data !== "object") return undefined;
  const d = data as Record<string, unknown>;
  const num = (v: unknown) => (typeof v === "number" && Number.isFinite(v) ? v : undefined);
  const figures = { percent: num(d["percent"]), done: num(d["done"]), total: num(d["total"]) };
  return progressText(figures) ? figures : undefined;
}
