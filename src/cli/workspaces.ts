import { Command } from "commander";
import { toJsonString } from "@bufbuild/protobuf";
import {
  FleetService,
  PauseWorkspaceResponseSchema,
  ResumeWorkspaceResponseSchema,
} from "../../gen/forelead/admin/v1/fleet_pb.js";
import {
  serviceClientFromFlags,
  withAdminClientOptions,
  type AdminClientFlags,
} from "./connection.js";

interface PauseFlags extends AdminClientFlags {
  reason?: string;
  json?: boolean;
}

/**
 * `forelead workspaces pause|resume`: claims skip a paused workspace; its running jobs go on and
 * settle (admin role).
 */
export function workspacesCommand(
  write: (text: string) => void = (t) => process.stdout.write(t),
): Command {
  const workspaces = new Command("workspaces");
  withAdminClientOptions(
    workspaces
      .command("pause")
      .description(
        "stop leasing the workspace's jobs; running jobs go on and settle (survives restarts, audited)",
      )
      .argument("<workspace>", "the workspace id")
      .option("--reason <text>", "why, for status and the audit record")
      .option("--json", "print the reply as JSON"),
  ).action(async (workspaceId: string, flags: PauseFlags) => {
    const fleet = await serviceClientFromFlags(flags, FleetService);
    const reply = await fleet.pauseWorkspace({
      apiVersion: "v1",
      workspaceId,
      reason: flags.reason ?? "",
    });
    write(
      flags.json
        ? `${toJsonString(PauseWorkspaceResponseSchema, reply)}\n`
        : `workspace ${JSON.stringify(reply.workspaceId)} ` +
            `${reply.alreadyPaused ? "was already paused" : "paused"}${reply.reason ? ` (${reply.reason})` : ""}\n`,
    );
  });
  withAdminClientOptions(
    workspaces
      .command("resume")
      .description("lease the workspace's jobs again")
      .argument("<workspace>", "the workspace id")
      .option("--json", "print the reply as JSON"),
  ).action(async (workspaceId: string, flags: PauseFlags) => {
    const fleet = await serviceClientFromFlags(flags, FleetService);
    const reply = await fleet.resumeWorkspace({ apiVersion: "v1", workspaceId });
    write(
      flags.json
        ? `${toJsonString(ResumeWorkspaceResponseSchema, reply)}\n`
        : `workspace ${JSON.stringify(reply.workspaceId)} ${reply.wasPaused ? "resumed" : "was not paused"}\n`,
    );
  });
  return workspaces;
}
