import { Command } from "commander";
import { toJsonString } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import {
  GetJobSamplesResponseSchema,
  GetSizingResponseSchema,
  SamplesService,
  type GetJobSamplesResponse,
  type GetSizingResponse,
  type ResourceAdvice,
} from "../../gen/forelead/admin/v1/samples_pb.js";
import {
  serviceClientFromFlags,
  withAdminClientOptions,
  type AdminClientFlags,
} from "./connection.js";
import { formatTable } from "./doctor.js";
import { timeForms } from "./stats.js";

interface SamplesFlags extends AdminClientFlags {
  json?: boolean;
}

interface SizingFlags extends SamplesFlags {
  since: string;
  workspace?: string;
}

/** Adds `samples JOB` to the `jobs` command: SamplesService GetJobSamples. */
export function addSamplesCommand(
  jobs: Command,
  write: (text: string) => void = (t) => process.stdout.write(t),
): Command {
  withAdminClientOptions(
    jobs
      .command("samples")
      .description("a job's CPU and memory samples as its runner reported them, and their peaks")
      .argument("<job>", "job id")
      .option("--json", "print the reply as JSON"),
  ).action(async (jobId: string, flags: SamplesFlags) => {
    const client = await serviceClientFromFlags(flags, SamplesService);
    const samples = await client.getJobSamples({ jobId });
    write(
      flags.json
        ? `${toJsonString(GetJobSamplesResponseSchema, samples)}\n`
        : formatSamples(samples),
    );
  });
  return jobs;
}

/**
 * `forelead sizing`: SamplesService GetSizing, a row per workspace, labels and image with the
 * advice.
 */
export function sizingCommand(
  write: (text: string) => void = (t) => process.stdout.write(t),
): Command {
  return withAdminClientOptions(
    new Command("sizing")
      .option("--since <time>", `jobs settled since: ${timeForms}`, "7d")
      .option("--workspace <id>", "only this workspace")
      .option("--json", "print the reply as JSON"),
  ).action(async (flags: SizingFlags) => {
    const client = await serviceClientFromFlags(flags, SamplesService);
    const sizing = await client.getSizing({
      since: flags.since,
      workspaceId: flags.workspace ?? "",
    });
    write(flags.json ? `${toJsonString(GetSizingResponseSchema, sizing)}\n` : formatSizing(sizing));
  });
}

/** The text `forelead jobs samples` prints: the peaks, then one line per sample. */
export function formatSamples(s: GetJobSamplesResponse): string {
  const head =
    `job ${s.jobId}: ${s.samples.length} samples, peak cpu ` +
    `${s.peakCpuCores.toFixed(2)} cores, peak memory ${s.peakMemoryBytes} ` +
    `bytes`;
  if (s.samples.length === 0) return `${head}\n`;
  const rows = s.samples.map((x) => [
    x.at ? timestampDate(x.at).toISOString() : "-",
    String(x.attempt),
    x.cpuCores.toFixed(2),
    String(x.memoryBytes),
  ]);
  return (
    [
      head,
      ...formatTable([["at", "attempt", "cpu cores", "memory bytes"], ...rows]).map(
        (l) => `  ${l}`,
      ),
    ].join("\n") + "\n"
  );
}

/** The text `forelead sizing` prints: a table, a row per group. */
export function formatSizing(s: GetSizingResponse): string {
  const head = `sizing of jobs settled since ${s.since ? timestampDate(s.since).toISOString() : "-"}`;
  if (s.groups.length === 0) return `${head}\nno settled jobs with samples in that time\n`;
  const rows = s.groups.map((g) => [
    g.workspaceId,
    g.labels.join(",") || "-",
    g.image || "-",
    String(g.jobs),
    ...advice(g.cpu, (v) => v.toFixed(2)),
    ...advice(g.memory, (v) => String(Math.round(v))),
  ]);
  return (
    [
      head,
      ...formatTable([
        [
          "workspace",
          "labels",
          "image",
          "jobs",
          "cpu req",
          "cpu p95",
          "cpu advice",
          "memory req",
          "memory p95",
          "memory advice",
        ],
        ...rows,
      ]),
    ].join("\n") + "\n"
  );
}

function advice(a: ResourceAdvice | undefined, show: (value: number) => string): string[] {
  if (!a) return ["-", "-", "-"];
  const says =
    a.advice === "fits" || !a.suggested ? a.advice : `${a.advice} to ${show(a.suggested)}`;
  return [a.requested ? show(a.requested) : "-", show(a.p95Peak), says || "-"];
}
