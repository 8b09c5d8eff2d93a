// A schedule's due times are croner's: across a DST change in Europe/Berlin (a local time that does
// not exist fires at the shift, a repeated hour fires once), with a seconds field and @names, and
// bad expressions and zones are refused by field.
import { Cron } from "croner";
import { ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { parseCron } from "../../src/broker/schedules/cron.js";

/** `n` due times after `from`, each the next after the last: how the ticker walks them. */
function walk(cron: string, timeZone: string, from: string, n: number): string[] {
  const times = parseCron(cron, timeZone);
  const out: string[] = [];
  let t = new Date(from);
  for (let i = 0; i < n; i++) {
    t = times.next(t)!;
    out.push(t.toISOString());
  }
  return out;
}

/** croner's own answer, walked the same way. */
function croners(cron: string, timeZone: string, from: string, n: number): string[] {
  const c = new Cron(cron, { timezone: timeZone });
  const out: string[] = [];
  let t = new Date(from);
  for (let i = 0; i < n; i++) {
    t = c.nextRun(t)!;
    out.push(t.toISOString());
  }
  return out;
}

describe("schedule cron times", () => {
  it("02:30 daily in Berlin across spring forward fires at 03:30 CEST, as croner says", () => {
    const got = walk("30 2 * * *", "Europe/Berlin", "2026-03-27T12:00:00Z", 4);
    expect(got).toEqual(croners("30 2 * * *", "Europe/Berlin", "2026-03-27T12:00:00Z", 4));
    expect(got).toEqual([
      "2026-03-28T01:30:00.000Z", // 02:30 CET
      "2026-03-29T01:30:00.000Z", // 02:30 does not exist: 03:30 CEST
      "2026-03-30T00:30:00.000Z", // 02:30 CEST
      "2026-03-31T00:30:00.000Z",
    ]);
  });

  it("02:30 daily in Berlin across fall back fires once on the repeated hour", () => {
    const got = walk("30 2 * * *", "Europe/Berlin", "2026-10-23T12:00:00Z", 4);
    expect(got).toEqual(croners("30 2 * * *", "Europe/Berlin", "2026-10-23T12:00:00Z", 4));
    expect(got).toEqual([
      "2026-10-24T00:30:00.000Z", // 02:30 CEST
      "2026-10-25T00:30:00.000Z", // the first 02:30 (CEST); the second (CET) does not fire
      "2026-10-26T01:30:00.000Z", // 02:30 CET
      "2026-10-27T01:30:00.000Z",
    ]);
  });

  it("@hourly across spring forward never repeats a time, unlike croner's nextRuns", () => {
    const got = walk("@hourly", "Europe/Berlin", "2026-03-29T00:30:00Z", 3);
    expect(got).toEqual(croners("@hourly", "Europe/Berlin", "2026-03-29T00:30:00Z", 3));
    expect(new Set(got).size).toBe(3);
    // previous() gives each due time once, though croner's previousRuns repeats 01:00Z here.
    const back = parseCron("@hourly", "Europe/Berlin").previous(
      3,
      new Date("2026-03-29T02:30:00Z"),
    );
    expect(back.map((t) => t.toISOString())).toEqual([
      "2026-03-29T02:00:00.000Z",
      "2026-03-29T01:00:00.000Z",
    ]);
  });

  it("a seconds field counts seconds; five fields start on the minute", () => {
    expect(walk("*/2 * * * * *", "UTC", "2026-01-01T00:00:00.500Z", 2)).toEqual([
      "2026-01-01T00:00:02.000Z",
      "2026-01-01T00:00:04.000Z",
    ]);
    expect(walk("*/15 * * * *", "UTC", "2026-01-01T00:00:01Z", 1)).toEqual([
      "2026-01-01T00:15:00.000Z",
    ]);
  });

  it.each([
    ["61 * * * *", "UTC", /^cron "61 \* \* \* \*" is not a cron expression/],
    ["* * * *", "UTC", /^cron "\* \* \* \*" is not a cron expression: 5 fields/],
    ["2030-01-01T00:00:00", "UTC", /^cron "2030-01-01T00:00:00" is not a cron expression/],
    ["@fortnightly", "UTC", /^cron "@fortnightly"/],
    ["0 3 * * *", "Europe/Atlantis", /^timeZone "Europe\/Atlantis" is not an IANA time zone/],
  ])("%s in %s is refused by field", (cron, timeZone, message) => {
    let err: unknown;
    try {
      parseCron(cron, timeZone);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).rawMessage).toMatch(message);
  });
});
