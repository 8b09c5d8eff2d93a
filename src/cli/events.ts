import { setTimeout as sleep } from "node:timers/promises";
import { Command, InvalidArgumentError } from "commander";
import { toJsonString } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import { FleetService, StreamEventsResponseSchema, type StreamEventsResponse } from "../../gen/forelead/admin/v1/fleet_pb.js";
import { serviceClientFromFlags, withAdminClientOptions, type AdminClientFlags } from "./admin-client.js";

interface EventsFlags extends AdminClientFlags {
  workspace?: string;
  type: string[];
  after?: bigint;
  follow?: boolean;
  json?: boolean;
}

/** Refusals a reconnect cannot cure: the request itself or the identity is wrong. */
const final = new Set([Code.InvalidArgument, Code.PermissionDenied, Code.Unauthenticated, Code.NotFound, Code.FailedPrecondition, Code.Unimplemented, Code.OutOfRange]);

/**
 * `forelead events`: the global event stream (FleetService StreamEvents).
 * With --follow it keeps going, and after a dropped connection (or a
 * restarted control plane) asks again with afterId = the last id it
 * printed: events are durable rows with increasing ids, so nothing is
 * missed or printed twice.
 */
export function eventsCommand(write: (text: string) => void = (t) => process.stdout.write(t), warn: (text: string) => void = (t) => process.stderr.write(t)): Command {
  return withAdminClientOptions(
    new Command("events")
      .description("the control plane's events (job.queued, job.leased, job.settled, runner.paused, workspace.paused, ...), oldest first")
      .option("--workspace <id>", "only this workspace's events")
      .option("--type <type>", "only events of this type (repeatable)", (value: string, previous: string[]) => [...previous, value], [] as string[])
      .option("--after <id>", "only events after this id (as a follower resumes)", eventId)
      .option("--follow", "keep printing new events; reconnects after a dropped connection without a gap or a duplicate")
      .option("--json", "one proto3 JSON object per event and line"),
  ).action(async (flags: EventsFlags) => {
    const fleet = await serviceClientFromFlags(flags, FleetService);
    let afterId = flags.after ?? 0n;
    for (let failures = 0; ; failures++) {
      try {
        for await (const event of fleet.streamEvents({ workspaceId: flags.workspace ?? "", types: flags.type, afterId, follow: flags.follow ?? false })) {
          afterId = event.id;
          failures = 0;
          write(flags.json ? `${toJsonString(StreamEventsResponseSchema, event)}\n` : formatEvent(event));
        }
        if (!flags.follow) return;
        warn(`forelead: events: the stream ended; resuming after event ${afterId}\n`);
      } catch (err) {
        const error = ConnectError.from(err);
        if (!flags.follow || final.has(error.code)) throw error;
        warn(`forelead: events: connection lost (${error.message}); resuming after event ${afterId}\n`);
      }
      await sleep(Math.min(5_000, 100 * 2 ** failures));
    }
  });
}

/** One event as a line: id, time, type, where (workspace, runner, job) and its data as compact JSON. */
export function formatEvent(e: StreamEventsResponse): string {
  const where = [e.workspaceId && `workspace=${e.workspaceId}`, e.runnerId && `runner=${e.runnerId}`, e.jobId && `job=${e.jobId}`].filter(Boolean).join(" ");
  const data = e.data && Object.keys(e.data).length > 0 ? `  ${JSON.stringify(e.data)}` : "";
  return `${e.id}  ${e.at ? timestampDate(e.at).toISOString() : "-"}  ${e.type}  ${where}${data}\n`;
}

function eventId(value: string): bigint {
  if (!/^\d+$/.test(value)) throw new InvalidArgumentError("an event id is a whole number, e.g. 1042");
  return BigInt(value);
}
