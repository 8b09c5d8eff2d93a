import { Command } from "commander";
import { toJsonString } from "@bufbuild/protobuf";
import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import {
  AdminService,
  ListRunnersResponseSchema,
  RetireRunnerResponseSchema,
  RunnerSchema,
  type Runner,
  type RunnerInventory,
} from "../../gen/forelead/admin/v1/admin_pb.js";
import {
  FleetService,
  ForgetRunnerResponseSchema,
  PauseRunnerResponseSchema,
  ResumeRunnerResponseSchema,
} from "../../gen/forelead/admin/v1/fleet_pb.js";
import {
  adminClientFromFlags,
  serviceClientFromFlags,
  withAdminClientOptions,
  withService,
  type AdminClientFlags,
} from "./connection.js";
import { formatTable } from "./doctor.js";

interface InventoryFlags extends AdminClientFlags {
  workspace?: string;
  items?: boolean;
}

interface PauseFlags extends AdminClientFlags {
  workspace?: string;
  reason?: string;
  json?: boolean;
}

/** `forelead runners ...`: operator views of runners, through the admin API. */
export function runnersCommand(
  write: (text: string) => void = (t) => process.stdout.write(t),
): Command {
  const runners = new Command("runners");
  withAdminClientOptions(
    runners
      .command("list")
      .description(
        "registered runners: state (idle, busy, paused, draining, offline, retired), slots, " +
          "live leases, labels, version, last seen",
      )
      .option("--workspace <id>", "only runners of this workspace")
      .option("--json", "print the reply as proto3 JSON"),
  ).action(async (flags: PauseFlags) => {
    const reply = await withService(flags, AdminService, (admin) =>
      admin.listRunners({ workspaceId: flags.workspace ?? "" }),
    );
    write(
      flags.json
        ? `${toJsonString(ListRunnersResponseSchema, reply)}\n`
        : formatRunners(reply.runners),
    );
  });
  withAdminClientOptions(
    runners
      .command("get")
      .description("one runner: its state, version, slots, leases, labels, capabilities, times")
      .argument("<runner>", "the runner id")
      .option("--workspace <id>", "the runner's workspace (when the id is used in several)")
      .option("--json", "print the runner as proto3 JSON"),
  ).action(async (runnerId: string, flags: PauseFlags) => {
    const reply = await withService(flags, AdminService, (admin) =>
      admin.listRunners({ workspaceId: flags.workspace ?? "" }),
    );
    const found = reply.runners.filter((r) => r.runnerId === runnerId);
    if (found.length === 0)
      throw new Error(
        `runner "${runnerId}" is not registered${flags.workspace ? ` in workspace "${flags.workspace}"` : ""}; ` +
          "check the id with forelead runners list",
      );
    if (found.length > 1)
      throw new Error(
        `runner id "${runnerId}" is registered in workspaces ` +
          `${found.map((r) => `"${r.workspaceId}"`).join(", ")}; give --workspace`,
      );
    write(flags.json ? `${toJsonString(RunnerSchema, found[0]!)}\n` : formatRunner(found[0]!));
  });
  withAdminClientOptions(
    runners
      .command("retire")
      .description(
        "retire a runner identity: refused from its next request on; its live leases go back to the queue (audited)",
      )
      .argument("<runner>", "the runner id")
      .option(
        "--workspace <id>",
        "the runner's workspace (needed when the runner id is used in several)",
      )
      .option("--reason <text>", "why, for the audit record")
      .option("--json", "print the reply as proto3 JSON"),
  ).action(async (runnerId: string, flags: PauseFlags) => {
    const reply = await withService(flags, AdminService, (admin) =>
      admin.retireRunner({
        apiVersion: "v1",
        runnerId,
        workspaceId: flags.workspace ?? "",
        reason: flags.reason ?? "",
      }),
    );
    const released = reply.releasedJobIds.length
      ? `; released ${reply.releasedJobIds.join(", ")} back to the queue`
      : "";
    write(
      flags.json
        ? `${toJsonString(RetireRunnerResponseSchema, reply)}\n`
        : `runner ${JSON.stringify(reply.runnerId)} in workspace ` +
            `${JSON.stringify(reply.workspaceId)} ` +
            `${reply.newlyRetired ? "retired" : "was already retired"}${released}\n`,
    );
  });
  withAdminClientOptions(
    runners
      .command("inventory")
      .description(
        "the latest inventory report of every runner (or RUNNER): items, flagged items and pending reap orders",
      )
      .argument("[runner]", "only this runner id")
      .option("--workspace <id>", "only runners of this workspace")
      .option("--items", "list every item (the default when RUNNER is given)"),
  ).action(async (runnerId: string | undefined, flags: InventoryFlags) => {
    const admin = await adminClientFromFlags(flags);
    const { reports } = await admin.listInventory({
      runnerId: runnerId ?? "",
      workspaceId: flags.workspace ?? "",
    });
    write(
      formatInventory(reports, { items: flags.items ?? runnerId !== undefined, now: new Date() }),
    );
  });
  withAdminClientOptions(
    runners
      .command("reap")
      .description(
        "order an orphan removed; accepted only when the runner's latest report calls it orphan",
      )
      .argument("<runner>", "the runner id")
      .argument("<kind>", "container or network")
      .argument("<name>", "the name as the runner reports it")
      .option(
        "--workspace <id>",
        "the runner's workspace (needed when the runner id is used in several)",
      ),
  ).action(async (runnerId: string, kind: string, name: string, flags: InventoryFlags) => {
    const admin = await adminClientFromFlags(flags);
    const { order } = await admin.orderReap({
      apiVersion: "v1",
      runnerId,
      workspaceId: flags.workspace ?? "",
      kind,
      name,
    });
    write(
      `order ${order?.id} ${order?.state}: runner ${order?.runnerId} in ` +
        `workspace ${order?.workspaceId} is told to remove ${order?.kind} ` +
        `${order?.name} in its next inventory reply\n`,
    );
  });
  withAdminClientOptions(
    runners
      .command("pause")
      .description(
        "give the runner no new lease (its claims wait or answer 204); its live " +
          "leases go on (survives restarts, audited)",
      )
      .argument("<runner>", "the runner id")
      .option(
        "--workspace <id>",
        "the runner's workspace (needed when the runner id is used in several)",
      )
      .option("--reason <text>", "why, for the audit record")
      .option("--json", "print the reply as JSON"),
  ).action(async (runnerId: string, flags: PauseFlags) => {
    const fleet = await serviceClientFromFlags(flags, FleetService);
    const reply = await fleet.pauseRunner({
      apiVersion: "v1",
      runnerId,
      workspaceId: flags.workspace ?? "",
      reason: flags.reason ?? "",
    });
    write(
      flags.json
        ? `${toJsonString(PauseRunnerResponseSchema, reply)}\n`
        : `runner ${JSON.stringify(reply.runnerId)} in workspace ` +
            `${JSON.stringify(reply.workspaceId)} ` +
            `${reply.alreadyPaused ? "was already paused" : "paused"}\n`,
    );
  });
  withAdminClientOptions(
    runners
      .command("resume")
      .description("lease jobs to the runner again")
      .argument("<runner>", "the runner id")
      .option(
        "--workspace <id>",
        "the runner's workspace (needed when the runner id is used in several)",
      )
      .option("--json", "print the reply as JSON"),
  ).action(async (runnerId: string, flags: PauseFlags) => {
    const fleet = await serviceClientFromFlags(flags, FleetService);
    const reply = await fleet.resumeRunner({
      apiVersion: "v1",
      runnerId,
      workspaceId: flags.workspace ?? "",
    });
    write(
      flags.json
        ? `${toJsonString(ResumeRunnerResponseSchema, reply)}\n`
        : `runner ${JSON.stringify(reply.runnerId)} in workspace ` +
            `${JSON.stringify(reply.workspaceId)} ` +
            `${reply.wasPaused ? "resumed" : "was not paused"}\n`,
    );
  });
  withAdminClientOptions(
    runners
      .command("forget")
      .description(
        "remove an offline runner's registration and inventory; its identity is not retired " +
          "(refused unless the runner is offline; audited)",
      )
      .argument("<runner>", "the runner id")
      .option(
        "--workspace <id>",
        "the runner's workspace (needed when the runner id is used in several)",
      )
      .option("--json", "print the reply as JSON"),
  ).action(async (runnerId: string, flags: PauseFlags) => {
    const fleet = await serviceClientFromFlags(flags, FleetService);
    const reply = await fleet.forgetRunner({
      apiVersion: "v1",
      runnerId,
      workspaceId: flags.workspace ?? "",
    });
    write(
      flags.json
        ? `${toJsonString(ForgetRunnerResponseSchema, reply)}\n`
        : `runner ${JSON.stringify(reply.runnerId)} in workspace ` +
            `${JSON.stringify(reply.workspaceId)} forgotten (its identity is not retired)\n`,
    );
  });
  return runners;
}

/** The table `forelead runners list` prints. */
export function formatRunners(runners: readonly Runner[]): string {
  if (runners.length === 0) return "no runners\n";
  const at = (t: Timestamp | undefined) => (t ? timestampDate(t).toISOString() : "-");
  const rows = runners.map((r) => [
    r.runnerId,
    r.workspaceId,
    r.state || "-",
    String(r.slots),
    String(r.liveLeases ?? 0),
    r.labels.join(",") || "-",
    r.architecture || "-",
    r.version || "-",
    at(r.lastSeenAt),
    r.retiredAt ? `retired ${at(r.retiredAt)}` : "",
  ]);
  const head = ["runner", "workspace", "state", "slots", "leases", "labels", "arch", "version"];
  return formatTable([[...head, "last seen", ""], ...rows]).join("\n") + "\n";
}

/** The text `forelead runners get` prints: one "name: value" line per field that is set. */
function formatRunner(r: Runner): string {
  const at = (t: Timestamp | undefined) => (t ? timestampDate(t).toISOString() : undefined);
  const rows: Array<[string, string | undefined]> = [
    ["runner", r.runnerId],
    ["workspace", r.workspaceId],
    ["state", r.state + (r.pausedBy ? ` (paused by ${r.pausedBy})` : "")],
    ["version", r.version || undefined],
    ["leases", `${r.liveLeases ?? 0} of ${r.slots} slots`],
    ["labels", r.labels.join(",") || undefined],
    ["platform", `${r.os || "-"}/${r.architecture || "-"}, ${r.cpu} CPU, ${r.memoryBytes} bytes`],
    ["executors", r.executionKinds.join(",") || undefined],
    ["features", r.features.join(",") || undefined],
    ["registered", at(r.registeredAt)],
    ["last seen", at(r.lastSeenAt)],
    ["paused", at(r.pausedAt)],
    ["retired", at(r.retiredAt)],
  ];
  return (
    formatTable(
      rows
        .filter((row): row is [string, string] => row[1] !== undefined && row[1] !== "")
        .map(([k, v]) => [`${k}:`, v]),
    ).join("\n") + "\n"
  );
}

/** The text `forelead runners inventory` prints: one block per runner, then totals. */
export function formatInventory(
  reports: readonly RunnerInventory[],
  options: { readonly items: boolean; readonly now: Date },
): string {
  if (reports.length === 0) return "no inventory reports\n";
  const lines: string[] = [];
  for (const r of reports) {
    const count = (kind: string) => r.items.filter((i) => i.kind === kind).length;
    const orphans = r.items.filter((i) => i.orphan).length;
    lines.push(
      `runner ${r.runnerId} in workspace ${r.workspaceId}: reported ${when(r.reportedAt, options.now)}; ` +
        `${plural(count("container"), "container")}, ` +
        `${plural(count("network"), "network")}, ${plural(orphans, "orphan")}`,
    );
    if (options.items) {
      for (const i of r.items) {
        const usage = i.kind === "container" ? `  cpu ${i.cpu}  memory ${i.memory}` : "";
        lines.push(
          `  ${i.kind.padEnd(9)} ${i.name}  ` +
            `${i.state || "-"}${i.image ? `  ${i.image}` : ""}${usage}${i.orphan ? "  ORPHAN" : ""}`,
        );
      }
    }
    for (const f of r.flags) lines.push(`  FLAGGED ${f.problem}: ${f.message}`);
    for (const o of r.pendingOrders)
      lines.push(
        `  ORDER ${o.id} pending: remove ${o.kind} ${o.name} (ordered by ` +
          `${o.orderedBy} ${when(o.orderedAt, options.now)})`,
      );
  }
  const flagged = reports.reduce((n, r) => n + r.flags.length, 0);
  const pending = reports.reduce((n, r) => n + r.pendingOrders.length, 0);
  lines.push(
    `${plural(reports.length, "runner")}, ${plural(flagged, "flagged item")}, ${plural(pending, "pending reap order")}`,
  );
  return lines.join("\n") + "\n";
}

function when(at: Timestamp | undefined, now: Date): string {
  if (!at) return "at an unknown time";
  const d = timestampDate(at);
  const ago = Math.max(0, Math.round((now.getTime() - d.getTime()) / 1000));
  return `at ${d.toISOString()} (${ago}s ago)`;
}

function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}
