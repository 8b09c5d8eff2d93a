import { Command } from "commander";
import { toJson } from "@bufbuild/protobuf";
import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import {
  GetStatusResponseSchema,
  StatusService,
  type GetStatusResponse,
} from "../../gen/forelead/admin/v1/status_pb.js";
import {
  serviceClientFromFlags,
  withAdminClientOptions,
  type AdminClientFlags,
} from "./connection.js";

interface StatusFlags extends AdminClientFlags {
  json?: boolean;
}

/** `forelead status`: GET /v1/admin/status as text, or its JSON. */
export function statusCommand(
  write: (text: string) => void = (t) => process.stdout.write(t),
): Command {
  return withAdminClientOptions(
    new Command("status").option("--json", "print the reply as JSON"),
  ).action(async (flags: StatusFlags) => {
    const client = await serviceClientFromFlags(flags, StatusService);
    const status = await client.getStatus({});
    write(
      flags.json
        ? `${JSON.stringify(toJson(GetStatusResponseSchema, status), null, 2)}\n`
        : formatStatus(status),
    );
  });
}

/** The text `forelead status` prints. */
export function formatStatus(s: GetStatusResponse): string {
  const at = (t: Timestamp | undefined) => (t ? timestampDate(t).toISOString() : "-");
  const d = s.database;
  const r = s.runners;
  const p = s.pool;
  const lines = [
    `forelead ${s.build?.version} (commit ` +
      `${s.build?.commit}${s.build?.buildDate ? `, ${s.build.buildDate}` : ""}), ` +
      `started ${at(s.startedAt)}`,
    `database: ${d?.kind} ` +
      `${d?.reachable ? `reachable (${d.roundTripMs.toFixed(1)} ms)` : "UNREACHABLE"}, ` +
      `migration ${d?.migration || "-"}, LISTEN ` +
      `${d?.listenConnected ? "connected" : "DOWN"}, audit backlog ` +
      `${d?.auditBacklogRecords} (${d?.auditSpoolBytes} bytes ` +
      `spooled${d?.auditOldestUnwritten ? `, oldest ${at(d.auditOldestUnwritten)}` : ""})`,
    `audit spool: ${d?.auditSpoolPath || "-"} held by ` +
      `${d?.auditSpoolHolder || "-"}, ${d?.auditSpoolRecords ?? 0} records ` +
      `waiting, ${d?.auditSpoolQuarantinedRecords ?? 0} ` +
      `quarantined${d?.auditSpoolQuarantinedRecords ? ` in ${d.auditSpoolQuarantinePath}` : ""}`,
    `replicas (${s.replicas.length}):`,
    ...s.replicas.map(
      (x) =>
        `  ${x.id}  ${x.host} pid ${x.pid}  ${x.version}  started ${at(x.startedAt)}  seen ${at(x.lastSeenAt)}`,
    ),
    `workspaces (${s.workspaces.length}):`,
    ...s.workspaces.map(
      (w) =>
        `  ${w.workspaceId}  queued ${w.queued}  running ` +
        `${w.running}${w.waitingInput ? `  waiting for input ${w.waitingInput}` : ""}  ` +
        `oldest queued ${w.oldestQueuedSeconds.toFixed(0)} ` +
        `s${w.paused ? "  PAUSED" : ""}`,
    ),
    `runners: ${r?.registered} registered, ${r?.connected} connected, ` +
      `${r?.busy} busy, ${r?.idle} idle, ${r?.paused} paused, ${r?.draining} draining, ` +
      `${r?.offline} offline, ${r?.retired} retired`,
    `pool: slots ${p?.slotsFree}/${p?.slotsTotal} free, cpu ` +
      `${p?.cpuFree}/${p?.cpuTotal} free, memory ` +
      `${p?.memoryBytesFree}/${p?.memoryBytesTotal} bytes free`,
    `scaling groups (${s.scalingGroups.length}):`,
    ...s.scalingGroups.map(
      (g) =>
        `  ${g.name}  ${g.spec?.workspaceId}  desired ${(g.runners ?? 0) + (g.wantedRunners ?? 0)}  ` +
        `runners ${g.runners ?? 0} (${g.runnersIdle ?? 0} idle, ${g.runnersDraining ?? 0} ` +
        `draining)  queued ${g.jobsQueued ?? 0}  wants ${g.wantedRunners ?? 0} more ` +
        `(${g.reason})  controller ${g.controller}`,
    ),
    `certificates: server until ${at(s.certificates?.serverNotAfter)}, ` +
      `issuer until ${at(s.certificates?.issuerNotAfter)}, ` +
      `${s.certificates?.expiringWithin24h} issued ending within 24 h`,
    ...(s.certificates?.expiring ?? []).map(
      (c) => `  ${c.serial}  ${c.spiffeId}  until ${at(c.notAfter)}`,
    ),
  ];
  return lines.join("\n") + "\n";
}
