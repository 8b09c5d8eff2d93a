// The schedule ticker: ticks at start, never two ticks at once, a failing tick is one log line
// however long it fails, its recovery one more, and close() stops it.
import { afterEach, describe, expect, it, vi } from "vitest";
import { startScheduleTicker } from "../../src/broker/schedules/ticker.js";

afterEach(() => vi.restoreAllMocks());

describe("the schedule ticker", () => {
  it("logs a failing tick once, its recovery once, and stops on close", async () => {
    const errors = vi.spyOn(console, "error").mockImplementation(() => {});
    const logs = vi.spyOn(console, "log").mockImplementation(() => {});
    let calls = 0;
    let running = 0;
    let overlapped = false;
    let reached: () => void = () => {};
    const at = (n: number) => new Promise<void>((r) => (reached = () => calls >= n && r()));
    const tick = async () => {
      overlapped ||= running > 0;
      running++;
      calls++;
      await new Promise((r) => setTimeout(r, 2));
      running--;
      reached();
      // Calls 1..5 fail, then it heals, then it fails once more.
      if (calls <= 5 || calls === 9) throw new Error(`the database said no (${calls})`);
    };
    const reachedTen = at(10);
    const ticker = startScheduleTicker(tick, 5);
    await reachedTen;
    await ticker.close();
    const stoppedAt = calls;
    await new Promise((r) => setTimeout(r, 30));
    expect(calls).toBe(stoppedAt);
    expect(overlapped).toBe(false);
    expect(errors.mock.calls.map((c) => String(c[0]))).toEqual([
      "forelead: firing schedules failed (retried each tick): the database said no (1)",
      "forelead: firing schedules failed (retried each tick): the database said no (9)",
    ]);
    expect(logs.mock.calls.map((c) => String(c[0]))).toEqual([
      "forelead: schedules fire again",
      "forelead: schedules fire again",
    ]);
  });
});
