import { Command } from "commander";
import { toJsonString } from "@bufbuild/protobuf";
import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import {
  GetStatsResponseSchema,
  StatsService,
  type CountBy,
  type DurationStats,
  type GetStatsResponse,
} from "../../gen/forelead/admin/v1/stats_pb.js";
import {
  serviceClientFromFlags,
  withAdminClientOptions,
  type AdminClientFlags,
} from "./connection.js";
import { formatTable } from "./doctor.js";

interface StatsFlags extends AdminClientFlags {
  since: string;
  until?: string;
  workspace?: string;
  json?: boolean;
}

/** The time forms the server takes for since/until, for the flags' help. */
export const timeForms = "RFC 3339, Unix seconds, a duration before now (720h, 90m) or days (30d)";

/** `forelead stats`: StatsService GetStats, a block per workspace. */
export function statsCommand(
  write: (text: string) => void = (t) => process.stdout.write(t),
): Command {
  return withAdminClientOptions(
    new Command("stats")
      .option("--since <time>", `from this time: ${timeForms}`, "7d")
      .option("--until <time>", "until this time, in the same forms (default: now)")
      .option("--workspace <id>", "only this workspace")
      .option("--json", "print the reply as JSON"),
  ).action(async (flags: StatsFlags) => {
    const client = await serviceClientFromFlags(flags, StatsService);
    const stats = await client.getStats({
      since: flags.since,
      until: flags.until ?? "",
      workspaceId: flags.workspace ?? "",
    });
    write(flags.json ? `${toJsonString(GetStatsResponseSchema, stats)}\n` : formatStats(stats));
  });
}

/** The text `forelead stats` prints. */
export function formatStats(s: GetStatsResponse): string {
  const lines = [`stats from ${at(s.since)} until ${at(s.until)}`];
  if (s.workspaces.length === 0) lines.push("no jobs in that time");
  for (const w of s.workspaces) {
    lines.push(
      "",
      `workspace ${w.workspaceId}: ${w.jobs} jobs (${counts(w.byState)}); error codes: ${counts(w.byErrorCode)}`,
      `  attempts ${w.attempts}, lease losses ${w.leaseLosses}, timeouts ${w.timeouts}, cancels ${w.cancels}`,
      ...formatTable([
        ["", "count", "p50 s", "p95 s", "max s"],
        durations("wait", w.wait),
        durations("run", w.run),
      ]).map((l) => `  ${l}`),
    );
    if (w.runners.length > 0)
      lines.push(
        ...formatTable([
          ["runner", "jobs", "busy s"],
          ...w.runners.map((r) => [r.runnerId, String(r.jobs), seconds(r.busySeconds)]),
        ]).map((l) => `  ${l}`),
      );
  }
  return lines.join("\n") + "\n";
}

function durations(name: string, d: DurationStats | undefined): string[] {
  return [
    name,
    String(d?.count ?? 0n),
    seconds(d?.p50Seconds),
    seconds(d?.p95Seconds),
    seconds(d?.maxSeconds),
  ];
}

function counts(by: readonly CountBy[]): string {
  return by.length === 0 ? "none" : by.map((c) => `${c.key} ${c.count}`).join(", ");
}

function seconds(value: number | undefined): string {
  return (value ?? 0).toFixed(1);
}

function at(t: Timestamp | undefined): string {
  return t ? timestampDate(t).toISOString() : "-";
}
