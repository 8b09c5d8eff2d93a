import { describe, expect, it } from "vitest";
import { parseTimeBound } from "../../src/api/time-range.js";
import { adviseOn, sizingRule } from "../../src/streams/sizing.js";

const MiB = 1024 * 1024;

describe("the sizing rule", () => {
  it("raises above 90% of the request, lowers below 50%, and keeps what lies between", () => {
    expect(adviseOn(1, 0.91, 1, sizingRule.cpuStep)).toMatchObject({
      advice: "raise",
      suggested: 1.1,
    });
    expect(adviseOn(1, 0.9, 1, sizingRule.cpuStep)).toMatchObject({ advice: "fits", suggested: 1 });
    expect(adviseOn(1, 0.5, 1, sizingRule.cpuStep)).toMatchObject({ advice: "fits", suggested: 1 });
    expect(adviseOn(1, 0.2, 1, sizingRule.cpuStep)).toMatchObject({
      advice: "lower",
      suggested: 0.3,
    });
  });

  it("never suggests less than one step, and a request of nothing gets a value to set", () => {
    expect(adviseOn(2, 0.001, 0.01, sizingRule.cpuStep)).toMatchObject({
      advice: "lower",
      suggested: 0.1,
    });
    expect(adviseOn(0, 100 * MiB, 120 * MiB, sizingRule.memoryStep)).toMatchObject({
      advice: "set",
      suggested: 128 * MiB,
    });
  });

  it("keeps a request that rounding would not lower", () => {
    // p95 0.04 of 0.1 is under half, but p95 plus headroom rounds up to 0.1: nothing to lower.
    expect(adviseOn(0.1, 0.04, 0.05, sizingRule.cpuStep)).toMatchObject({
      advice: "fits",
      suggested: 0.1,
    });
  });
});

describe("since", () => {
  const now = Date.parse("2026-12-01T12:00:00Z");
  it("reads RFC 3339, Unix seconds, durations and days; the default 7d", () => {
    expect(parseTimeBound("since", "2026-11-30T12:00:00Z", new Date(now)).toISOString()).toBe(
      "2026-11-30T12:00:00.000Z",
    );
    expect(parseTimeBound("since", "2026-11-30T13:00:00+01:00", new Date(now)).toISOString()).toBe(
      "2026-11-30T12:00:00.000Z",
    );
    expect(parseTimeBound("since", "1795000000", new Date(now)).getTime()).toBe(1795000000 * 1000);
    expect(parseTimeBound("since", "720h", new Date(now)).toISOString()).toBe(
      "2026-11-01T12:00:00.000Z",
    );
    expect(parseTimeBound("since", "90m", new Date(now)).toISOString()).toBe(
      "2026-12-01T10:30:00.000Z",
    );
    expect(parseTimeBound("since", "30d", new Date(now)).toISOString()).toBe(
      "2026-11-01T12:00:00.000Z",
    );
    expect(parseTimeBound("since", "7d", new Date(now)).toISOString()).toBe(
      "2026-11-24T12:00:00.000Z",
    );
  });

  it("refuses anything else, naming the forms", () => {
    for (const bad of [
      "soon",
      "1w",
      "1.5h",
      "2026-02-30T00:00:00Z",
      "2026-11-30T24:00:00Z",
      "2026-11-30T12:00:00Z x",
      "2026-11-30",
    ]) {
      expect(() => parseTimeBound("since", bad, new Date(now))).toThrow(
        /is not a time; use RFC 3339 .*Unix seconds.*720h.*30d/,
      );
    }
  });
});
