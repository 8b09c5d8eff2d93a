import { Command } from "commander";
import { toJsonString } from "@bufbuild/protobuf";
import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import {
  CreateScheduleRequestSchema,
  CreateScheduleResponseSchema,
  DeleteScheduleResponseSchema,
  GetScheduleResponseSchema,
  ListSchedulesResponseSchema,
  PauseScheduleResponseSchema,
  ResumeScheduleResponseSchema,
  RunScheduleResponseSchema,
  ScheduleService,
  type Schedule,
  type ScheduleFire,
} from "../../gen/forelead/admin/v1/schedules_pb.js";
import {
  serviceClientFromFlags,
  withAdminClientOptions,
  type AdminClientFlags,
} from "./connection.js";
import { readRequestFile, table } from "./pipelines.js";

interface JsonFlags extends AdminClientFlags {
  json?: boolean;
}
interface CreateFlags extends JsonFlags {
  workspace?: string;
  name?: string;
  cron?: string;
  timeZone?: string;
  missedRuns?: string;
  overlap?: string;
}
interface ListFlags extends JsonFlags {
  workspace?: string;
}

/**
 * `forelead schedules create|list|get|pause|resume|delete|run-now`: cron schedules that enqueue a
 * job or submit a pipeline at each due time (docs/schedules.md).
 */
export function schedulesCommand(
  write: (text: string) => void = (t) => process.stdout.write(t),
): Command {
  const schedules = new Command("schedules");
  const client = (flags: AdminClientFlags) => serviceClientFromFlags(flags, ScheduleService);
  withAdminClientOptions(
    schedules
      .command("create")
      .description(
        "create the schedule in FILE (YAML or JSON: name, workspaceId, cron, timeZone, " +
          "job {labels, spec, secrets, ...} or pipeline {name, steps}, missedRuns, overlap)",
      )
      .argument("<file>", "the schedule file")
      .option("--workspace <id>", "the workspace, instead of the file's workspaceId")
      .option("--name <name>", "the name, instead of the file's")
      .option("--cron <expr>", 'the cron expression, e.g. "0 3 * * *" or "*/30 * * * * *"')
      .option("--time-zone <zone>", 'an IANA time zone, e.g. "Europe/Berlin" (default UTC)')
      .option("--missed-runs <policy>", "skip (default), runOnce or all")
      .option("--overlap <policy>", "allow (default), skip or cancelPrevious")
      .option("--json", "print the reply as JSON"),
  ).action(async (file: string, flags: CreateFlags) => {
    const req = await readRequestFile(
      file,
      CreateScheduleRequestSchema,
      "{name, workspaceId, cron, timeZone, job: {...} or pipeline: {...}}",
    );
    if (flags.workspace) req.workspaceId = flags.workspace;
    if (flags.name) req.name = flags.name;
    if (flags.cron) req.cron = flags.cron;
    if (flags.timeZone) req.timeZone = flags.timeZone;
    if (flags.missedRuns) req.missedRuns = flags.missedRuns;
    if (flags.overlap) req.overlap = flags.overlap;
    const reply = await (await client(flags)).createSchedule(req);
    write(
      flags.json
        ? `${toJsonString(CreateScheduleResponseSchema, reply)}\n`
        : formatSchedule(reply.schedule!),
    );
  });
  withAdminClientOptions(
    schedules
      .command("list")
      .description("schedules, by workspace and name")
      .option("--workspace <id>", "only this workspace")
      .option("--json", "print the reply as JSON"),
  ).action(async (flags: ListFlags) => {
    const reply = await (await client(flags)).listSchedules({ workspaceId: flags.workspace ?? "" });
    if (flags.json) return write(`${toJsonString(ListSchedulesResponseSchema, reply)}\n`);
    write(
      table([
        ["SCHEDULE", "WORKSPACE", "NAME", "CRON", "TIME ZONE", "NEXT RUN", "PAUSED"],
        ...reply.schedules.map((s) => [
          s.id,
          s.workspaceId,
          s.name,
          s.cron,
          s.timeZone,
          time(s.nextRunAt),
          s.paused ? "yes" : "no",
        ]),
      ]),
    );
  });
  withAdminClientOptions(
    schedules
      .command("get")
      .description("a schedule with its recent fires and their job ids")
      .argument("<schedule>", "schedule id")
      .option("--json", "print the reply as JSON"),
  ).action(async (scheduleId: string, flags: JsonFlags) => {
    const reply = await (await client(flags)).getSchedule({ scheduleId });
    write(
      flags.json
        ? `${toJsonString(GetScheduleResponseSchema, reply)}\n`
        : formatSchedule(reply.schedule!),
    );
  });
  const act = (name: string, description: string, call: Action) =>
    withAdminClientOptions(
      schedules
        .command(name)
        .description(description)
        .argument("<schedule>", "schedule id")
        .option("--json", "print the reply as JSON"),
    ).action(async (scheduleId: string, flags: JsonFlags) =>
      write(await call(await client(flags), scheduleId, flags.json === true)),
    );
  act("pause", "stop firing until resumed", async (c, scheduleId, json) => {
    const reply = await c.pauseSchedule({ apiVersion: "v1", scheduleId });
    return json
      ? `${toJsonString(PauseScheduleResponseSchema, reply)}\n`
      : formatSchedule(reply.schedule!);
  });
  act("resume", "fire again from the next due time after now", async (c, scheduleId, json) => {
    const reply = await c.resumeSchedule({ apiVersion: "v1", scheduleId });
    return json
      ? `${toJsonString(ResumeScheduleResponseSchema, reply)}\n`
      : formatSchedule(reply.schedule!);
  });
  act("delete", "delete a schedule and its history (its jobs stay)", async (c, id, json) => {
    const reply = await c.deleteSchedule({ apiVersion: "v1", scheduleId: id });
    return json
      ? `${toJsonString(DeleteScheduleResponseSchema, reply)}\n`
      : `deleted schedule ${reply.schedule!.id} ${JSON.stringify(reply.schedule!.name)}\n`;
  });
  act("run-now", "fire now, under the overlap policy", async (c, scheduleId, json) => {
    const reply = await c.runSchedule({ apiVersion: "v1", scheduleId });
    return json
      ? `${toJsonString(RunScheduleResponseSchema, reply)}\n`
      : table([fireHeader, fireRow(reply.fire!)]);
  });
  return schedules;
}

type Action = (
  client: Awaited<ReturnType<typeof serviceClientFromFlags<typeof ScheduleService>>>,
  scheduleId: string,
  json: boolean,
) => Promise<string>;

const fireHeader = ["DUE", "CAUSE", "OUTCOME", "JOB", "CANCELLED"];

function fireRow(f: ScheduleFire): string[] {
  return [
    time(f.dueAt),
    f.cause,
    f.outcome + (f.error ? ` (${f.error})` : ""),
    f.jobId || f.pipelineId || "-",
    f.cancelledId || "-",
  ];
}

function time(t: Timestamp | undefined): string {
  return t ? timestampDate(t).toISOString() : "-";
}

function formatSchedule(s: Schedule): string {
  const what = s.job ? "a job" : `pipeline ${JSON.stringify(s.pipeline?.name ?? "")}`;
  return (
    `schedule ${s.id} ${JSON.stringify(s.name)} in workspace ${JSON.stringify(s.workspaceId)}: ` +
    `${JSON.stringify(s.cron)} ${s.timeZone}, starts ${what}; missed runs ${s.missedRuns}, ` +
    `overlap ${s.overlap}\n` +
    (s.paused
      ? `paused by ${s.pausedBy} at ${time(s.pausedAt)}\n`
      : `next run ${time(s.nextRunAt)}\n`) +
    (s.secretNames.length ? `secrets: ${s.secretNames.join(", ")}\n` : "") +
    (s.recentFires.length ? table([fireHeader, ...s.recentFires.map(fireRow)]) : "")
  );
}
