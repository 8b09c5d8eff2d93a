import { readFile } from "node:fs/promises";
import { Command, CommanderError } from "commander";
import { describe, expect, it } from "vitest";
import { addRetentionOptions, retentionsFromFlags } from "../../src/cli/retention-flags.js";
import { serveCommand } from "../../src/cli/serve.js";
import { parseDuration } from "../../src/identity/ca.js";
import {
  defaultRetentions,
  minimumRetentionMs,
  retentionKinds,
  retentionRules,
} from "../../src/ops/retention-kinds.js";

/** Parses `args` with the retention flags alone; the retentions, or the error commander printed. */
function parse(args: string[]) {
  let printed = "";
  const command = addRetentionOptions(new Command())
    .exitOverride()
    .configureOutput({ writeErr: (s) => void (printed += s) });
  try {
    command.parse(args, { from: "user" });
  } catch (err) {
    if (err instanceof CommanderError) return { error: printed };
    throw err;
  }
  return { retentions: retentionsFromFlags(command.opts()) };
}

describe("retention flags", () => {
  it("forelead serve has one flag per kind of record", () => {
    const flags = serveCommand().options.map((o) => o.long);
    for (const kind of retentionKinds) expect(flags).toContain(retentionRules[kind].flag);
  });

  it("reads each kind's duration in milliseconds and leaves the others to their defaults", () => {
    expect(parse(["--job-retention", "2h", "--audit-retention", "1d12h"])).toEqual({
      retentions: { jobs: 2 * 3600_000, audit: 36 * 3600_000 },
    });
    expect(parse(["--webhook-delivery-retention", "90m"])).toEqual({
      retentions: { webhookDeliveries: 90 * 60_000 },
    });
  });

  it("refuses a retention below its minimum, naming the flag and the minimum", () => {
    expect(parse(["--job-retention", "5m"]).error).toContain(
      "--job-retention 5m is shorter than its minimum of 1h",
    );
    expect(parse(["--audit-retention", "23h"]).error).toContain(
      "--audit-retention 23h is shorter than its minimum of 1d",
    );
  });

  it("refuses a retention that is not a duration, naming the flag", () => {
    expect(parse(["--session-retention", "soon"]).error).toContain(
      '--session-retention "soon" is not a duration',
    );
    expect(parse(["--grant-retention", "-1d"]).error).toContain("--grant-retention");
  });

  it("the written defaults and minimums are the ones in force", () => {
    for (const kind of retentionKinds) {
      const rule = retentionRules[kind];
      expect(parseDuration(rule.defaultText), kind).toBe(defaultRetentions[kind]);
      expect(parseDuration(rule.minimumText), kind).toBe(minimumRetentionMs(kind));
      expect(defaultRetentions[kind], kind).toBeGreaterThanOrEqual(minimumRetentionMs(kind));
    }
  });

  it("docs/retention.md's table lists every kind with its flag, default and minimum", async () => {
    const doc = await readFile("docs/retention.md", "utf8");
    const rows = doc
      .split("\n")
      .filter((l) => /^\| [a-zA-Z]+ \| `--/.test(l))
      .map((l) => l.split("|").map((c) => c.trim()));
    expect(rows.map((r) => r[1])).toEqual([...retentionKinds]);
    for (const r of rows) {
      const rule = retentionRules[r[1] as (typeof retentionKinds)[number]];
      expect([r[2], r[3], r[4]]).toEqual([`\`${rule.flag}\``, rule.defaultText, rule.minimumText]);
    }
  });
});
