import type { ServiceImpl } from "@connectrpc/connect";
import { Code, ConnectError } from "@connectrpc/connect";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { AutoscaleService } from "../../gen/forelead/admin/v1/autoscale_pb.js";
import type { Broker } from "../broker/broker.js";
import type { GroupDemand, KindDemand, ScalingGroup } from "../broker/fleet/demand.js";
import { checkSegmentId } from "../identity/segment-id.js";
import { audited } from "./audit-actions.js";
import { apiVersion } from "./request-rules.js";

/** Demand (read role) and scaling-group registrations (admin, audited). */
export function createAutoscaleService(broker: Broker): ServiceImpl<typeof AutoscaleService> {
  return {
    async getDemand(req) {
      if (req.workspaceId) checkSegmentId("workspaceId", req.workspaceId);
      const { groups, kinds } = await broker.demand(req.workspaceId);
      return { apiVersion, groups: groups.map(groupMessage), kinds: kinds.map(kindMessage) };
    },
    async getGroupDemand(req) {
      const found = await broker.groupDemand(req.name);
      if (!found)
        throw new ConnectError(
          `no scaling group "${req.name.slice(0, 80)}" is registered; GET /v1/admin/demand lists them`,
          Code.NotFound,
        );
      return { group: groupMessage(found) };
    },
    async putScalingGroup(req, ctx) {
      const spec = req.spec;
      const hold = await audited(
        ctx,
        "scaling_group.put",
        `scaling group "${req.name.slice(0, 80)}"`,
        () =>
          broker.putScalingGroup({
            name: req.name,
            workspaceId: spec?.workspaceId ?? "",
            labels: spec?.labels ?? [],
            architecture: spec?.architecture ?? "",
            os: spec?.os ?? "",
            executionKinds: spec?.executionKinds ?? [],
            features: spec?.features ?? [],
            minRunners: spec?.minRunners ?? 0,
            maxRunners: spec?.maxRunners ?? 0,
            slotsPerRunner: spec?.slotsPerRunner ?? 0,
            idleSeconds: spec?.idleSeconds ?? 0,
            cooldownSeconds: spec?.cooldownSeconds ?? 0,
            provider: spec?.provider ?? "",
            controller: req.controller,
            leaseSeconds: req.leaseSeconds,
          }),
        (h) => ({
          target: `scaling group "${h.name}"`,
          reason: `held by controller "${h.controller}"${h.tookOver ? " (taken over)" : ""}`,
        }),
      );
      return {
        apiVersion,
        name: hold.name,
        controller: hold.controller,
        leaseExpiresAt: timestampFromDate(hold.leaseExpiresAt),
        tookOver: hold.tookOver,
      };
    },
  };
}

function specMessage(g: ScalingGroup) {
  return {
    workspaceId: g.workspaceId,
    labels: [...g.labels],
    minRunners: g.minRunners,
    maxRunners: g.maxRunners,
    slotsPerRunner: g.slotsPerRunner,
    idleSeconds: g.idleSeconds,
    cooldownSeconds: g.cooldownSeconds,
    provider: g.provider,
    architecture: g.architecture ?? "",
    os: g.os ?? "",
    executionKinds: [...g.executionKinds],
    features: [...g.features],
  };
}

/** A group's demand as the wire's GroupDemand (GetDemand, GetGroupDemand, GetStatus). */
export function groupMessage(d: GroupDemand) {
  return {
    name: d.group.name,
    spec: specMessage(d.group),
    jobsQueued: d.jobsQueued,
    jobsRunning: d.jobsRunning,
    runners: d.runners,
    runnersIdle: d.runnersIdle,
    runnersDraining: d.runnersDraining,
    slotsFree: d.slotsFree,
    oldestWaitSeconds: d.oldestWaitSeconds,
    wantedRunners: d.wantedRunners,
    reason: d.reason,
    controller: d.group.controller,
    leaseExpiresAt: timestampFromDate(d.group.leaseExpiresAt),
  };
}

function kindMessage(k: KindDemand) {
  return {
    workspaceId: k.workspaceId,
    labels: [...k.labels],
    architecture: k.architecture ?? "",
    os: k.os ?? "",
    executionKind: k.executionKind ?? "",
    features: [...k.features],
    jobsQueued: k.jobsQueued,
    jobsScheduled: k.jobsScheduled,
    jobsRunning: k.jobsRunning,
    runnersIdle: k.runnersIdle,
    slotsFree: k.slotsFree,
    oldestWaitSeconds: k.oldestWaitSeconds,
    groups: [...k.groups],
    wantedRunners: k.wantedRunners,
    reason: k.reason,
  };
}
