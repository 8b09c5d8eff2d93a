import type { ServiceImpl } from "@connectrpc/connect";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { JsonObject } from "@bufbuild/protobuf";
import type { FleetService } from "../../gen/forelead/admin/v1/fleet_pb.js";
import type { Pauses, PauseState } from "../broker/fleet/pauses.js";
import type { EventEntry } from "../events/read.js";
import type { Events } from "../events/events.js";
import type { Broker } from "../broker/broker.js";
import { audited } from "./audit-actions.js";
import { principalOf } from "./context.js";
import { apiVersion } from "./request-rules.js";

/** What the fleet service is bound to. */
export interface FleetServiceDeps {
  readonly pauses: Pauses;
  readonly events: Events;
  /** Removes an offline runner's registration (Broker.forgetRunner). */
  readonly forgetRunner: Broker["forgetRunner"];
  /** Orders a runner to drain (Broker.drainRunner). */
  readonly drainRunner: Broker["drainRunner"];
}

/** Pause and resume (audited), and the global event stream. */
export function createFleetService(deps: FleetServiceDeps): ServiceImpl<typeof FleetService> {
  const { pauses, events } = deps;
  const workspaceTarget = (workspaceId: string) => `workspace "${workspaceId.slice(0, 140)}"`;
  const runnerTarget = (runnerId: string, workspaceId: string) =>
    `runner "${runnerId.slice(0, 140)}"${workspaceId ? ` in workspace "${workspaceId.slice(0, 140)}"` : ""}`;
  const outcome = (target: string) => (s: PauseState) => ({
    target,
    reason: s.paused
      ? s.changed
        ? `paused${s.reason ? ` (${s.reason})` : ""}`
        : `already paused at ${s.pausedAt?.toISOString()} by ${s.pausedBy}`
      : s.changed
        ? "resumed"
        : "was not paused",
  });
  return {
    async pauseWorkspace(req, ctx) {
      const target = workspaceTarget(req.workspaceId);
      const s = await audited(
        ctx,
        "workspace.pause",
        target,
        () =>
          pauses.pauseWorkspace({
            workspaceId: req.workspaceId,
            by: principalOf(ctx).spiffeId.text,
            reason: req.reason,
          }),
        outcome(target),
      );
      return {
        apiVersion,
        workspaceId: s.workspaceId,
        pausedBy: s.pausedBy ?? "",
        reason: s.reason ?? "",
        alreadyPaused: !s.changed,
        pausedAt: s.pausedAt ? timestampFromDate(s.pausedAt) : undefined,
      };
    },
    async resumeWorkspace(req, ctx) {
      const target = workspaceTarget(req.workspaceId);
      const s = await audited(
        ctx,
        "workspace.resume",
        target,
        () =>
          pauses.resumeWorkspace({
            workspaceId: req.workspaceId,
            by: principalOf(ctx).spiffeId.text,
          }),
        outcome(target),
      );
      return { apiVersion, workspaceId: s.workspaceId, wasPaused: s.changed };
    },
    async pauseRunner(req, ctx) {
      const s = await audited(
        ctx,
        "runner.pause",
        runnerTarget(req.runnerId, req.workspaceId),
        () =>
          pauses.pauseRunner({
            runnerId: req.runnerId,
            workspaceId: req.workspaceId,
            by: principalOf(ctx).spiffeId.text,
            reason: req.reason,
          }),
        (r) => outcome(runnerTarget(req.runnerId, r.workspaceId))(r),
      );
      return {
        apiVersion,
        runnerId: req.runnerId,
        workspaceId: s.workspaceId,
        pausedBy: s.pausedBy ?? "",
        alreadyPaused: !s.changed,
        pausedAt: s.pausedAt ? timestampFromDate(s.pausedAt) : undefined,
      };
    },
    async resumeRunner(req, ctx) {
      const s = await audited(
        ctx,
        "runner.resume",
        runnerTarget(req.runnerId, req.workspaceId),
        () =>
          pauses.resumeRunner({
            runnerId: req.runnerId,
            workspaceId: req.workspaceId,
            by: principalOf(ctx).spiffeId.text,
          }),
        (r) => outcome(runnerTarget(req.runnerId, r.workspaceId))(r),
      );
      return {
        apiVersion,
        runnerId: req.runnerId,
        workspaceId: s.workspaceId,
        wasPaused: s.changed,
      };
    },
    async drainRunner(req, ctx) {
      const s = await audited(
        ctx,
        "runner.drain",
        runnerTarget(req.runnerId, req.workspaceId),
        () =>
          deps.drainRunner({
            runnerId: req.runnerId,
            workspaceId: req.workspaceId,
            by: principalOf(ctx).spiffeId.text,
          }),
        (r) => ({
          target: runnerTarget(req.runnerId, r.workspaceId),
          reason: r.changed ? "drain ordered" : "drain was ordered already",
        }),
      );
      return {
        apiVersion,
        runnerId: req.runnerId,
        workspaceId: s.workspaceId,
        drainingAt: timestampFromDate(s.drainingAt),
        alreadyOrdered: !s.changed,
      };
    },
    async forgetRunner(req, ctx) {
      const done = await audited(
        ctx,
        "runner.forget",
        runnerTarget(req.runnerId, req.workspaceId),
        () =>
          deps.forgetRunner({
            runnerId: req.runnerId,
            workspaceId: req.workspaceId,
            by: principalOf(ctx).spiffeId.text,
          }),
        (r) => ({ target: runnerTarget(req.runnerId, r.workspaceId), reason: "forgotten" }),
      );
      return { apiVersion, runnerId: req.runnerId, workspaceId: done.workspaceId };
    },
    async *streamEvents(req, ctx) {
      const query = {
        workspaceId: req.workspaceId,
        types: req.types,
        afterId: Number(req.afterId),
        pageSize: req.pageSize,
      };
      const entries = req.follow ? events.follow(query, ctx.signal) : events.read(query);
      for await (const e of entries) yield eventMessage(e);
    },
  };
}

function eventMessage(e: EventEntry) {
  return {
    id: BigInt(e.id),
    at: timestampFromDate(e.at),
    type: e.type,
    workspaceId: e.workspaceId ?? "",
    runnerId: e.runnerId ?? "",
    jobId: e.jobId ?? "",
    data: e.data as JsonObject,
  };
}
