import { Command, InvalidArgumentError } from "commander";
import { toJsonString } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import {
  FleetService,
  StreamEventsResponseSchema,
  type StreamEventsResponse,
} from "../../gen/forelead/admin/v1/fleet_pb.js";
import { followResuming } from "./follow.js";
import {
  serviceClientFromFlags,
  withAdminClientOptions,
  type AdminClientFlags,
} from "./connection.js";

interface EventsFlags extends AdminClientFlags {
  workspace?: string;
  type: string[];
  after?: bigint;
  follow?: boolean;
  json?: boolean;
}

/**
 * `forelead events`: the global event stream (FleetService StreamEvents).
 * With --follow it keeps going, and after a dropped connection (or a
 * restarted control plane) asks again with afterId = the last id it
 * printed: events are durable rows with increasing ids, so nothing is
 * missed or printed twice.
 */
export function eventsCommand(
  write: (text: string) => void = (t) => process.stdout.write(t),
  warn: (text: string) => void = (t) => process.stderr.write(t),
): Command {
  return withAdminClientOptions(
    new Command("events")
      .option("--workspace <id>", "only this workspace's events")
      .option(
        "--type <type>",
        "only events of this type (repeatable)",
        (value: string, previous: string[]) => [...previous, value],
        [] as string[],
      )
      .option("--after <id>", "only events after this id (as a follower resumes)", eventId)
      .option(
        "--follow",
        "keep printing new events; reconnects after a dropped connection without a gap or a duplicate",
      )
      .option("--json", "one proto3 JSON object per event and line"),
  ).action(async (flags: EventsFlags) => {
    const fleet = await serviceClientFromFlags(flags, FleetService);
    const print = (event: StreamEventsResponse) =>
      write(
        flags.json ? `${toJsonString(StreamEventsResponseSchema, event)}\n` : formatEvent(event),
      );
    const open = (afterId: bigint) =>
      fleet.streamEvents({
        workspaceId: flags.workspace ?? "",
        types: flags.type,
        afterId,
        follow: flags.follow ?? false,
      });
    if (!flags.follow) {
      for await (const event of open(flags.after ?? 0n)) print(event);
      return;
    }
    await followResuming({
      start: flags.after ?? 0n,
      open,
      cursorOf: (e) => e.id,
      onItem: print,
      onEnd: "resume",
      describe: (id) => `resuming after event ${id}`,
      name: "events",
      warn,
    });
  });
}

/**
 * One event as a line: id, time, type, where (workspace, runner, job) and its data as compact JSON.
 */
export function formatEvent(e: StreamEventsResponse): string {
  const where = [
    e.workspaceId && `workspace=${e.workspaceId}`,
    e.runnerId && `runner=${e.runnerId}`,
    e.jobId && `job=${e.jobId}`,
  ]
    .filter(Boolean)
    .join(" ");
  const data = e.data && Object.keys(e.data).length > 0 ? `  ${JSON.stringify(e.data)}` : "";
  return `${e.id}  ${e.at ? timestampDate(e.at).toISOString() : "-"}  ${e.type}  ${where}${data}\n`;
}

function eventId(value: string): bigint {
  if (!/^\d+$/.test(value))
    throw new InvalidArgumentError("an event id is a whole number, e.g. 1042");
  return BigInt(value);
}
