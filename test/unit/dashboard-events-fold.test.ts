import { describe, expect, it } from "vitest";
import { foldEvents, newestRows } from "../../src/dashboard/web/job/fold-events.js";

const e = (position: number, type: string, attempt = 1) => ({
  position: String(position),
  attempt,
  type,
});

describe("the Job page's events table", () => {
  it("folds a run of one type and attempt into one row: the newest, counted", () => {
    const rows = foldEvents([
      e(1, "job.started"),
      e(2, "job.progress"),
      e(3, "job.progress"),
      e(4, "job.progress"),
      e(5, "test.step"),
      e(6, "job.progress"),
      e(7, "job.progress", 2),
    ]);
    expect(rows.map((r) => [r.last.position, r.last.type, r.count])).toEqual([
      ["1", "job.started", 1],
      ["4", "job.progress", 3],
      ["5", "test.step", 1],
      ["6", "job.progress", 1],
      ["7", "job.progress", 1],
    ]);
  });

  it("shows only the newest rows until all are asked for", () => {
    const rows = Array.from({ length: 120 }, (_, i) => i);
    expect(newestRows(rows, false)).toEqual({ shown: rows.slice(70), hidden: 70 });
    expect(newestRows(rows, true)).toEqual({ shown: rows, hidden: 0 });
    expect(newestRows(rows.slice(0, 50), false)).toEqual({ shown: rows.slice(0, 50), hidden: 0 });
  });
});
