import type { ServiceImpl } from "@connectrpc/connect";
import type { JsonValue } from "@bufbuild/protobuf";
import {
  ScheduleFireSchema,
  ScheduleSchema,
  type ScheduleService,
} from "../../gen/forelead/admin/v1/schedules_pb.js";
import type { Broker } from "../broker/broker.js";
import type { ScheduleView } from "../broker/schedules/schedules.js";
import { decodeJson } from "../protocol/json/codec.js";
import { audited } from "./audit-actions.js";
import { principalOf } from "./context.js";
import { enqueueInputOf } from "./enqueue-input.js";
import { stepOf } from "./pipeline-service.js";
import { apiVersion } from "./request-rules.js";

/** The schedule surface: decode, call the broker's schedules, encode. */
export function createScheduleService(broker: Broker): ServiceImpl<typeof ScheduleService> {
  const { schedules } = broker;
  const target = (s: ScheduleView) => ({
    target: `schedule ${String(s.id)} ("${String(s.name)}") in workspace "${String(s.workspaceId)}"`,
    reason: `schedule ${String(s.id)} is ${s.paused ? "paused" : `due at ${String(s.nextRunAt)}`}`,
  });
  const named = (id: string) => `schedule ${id.slice(0, 80)}`;
  return {
    async createSchedule(req, ctx) {
      const createdBy = principalOf(ctx).spiffeId.text;
      const t = req.template;
      const create = () =>
        schedules.create({
          workspaceId: req.workspaceId,
          name: req.name,
          cron: req.cron,
          timeZone: req.timeZone,
          missedRuns: req.missedRuns,
          overlap: req.overlap,
          createdBy,
          // The template's own workspaceId, idempotencyKey and runAt go through: the broker
          // refuses them by name.
          job: t.case === "job" ? enqueueInputOf(t.value, createdBy) : undefined,
          pipeline:
            t.case === "pipeline"
              ? {
                  workspaceId: t.value.workspaceId,
                  name: t.value.name,
                  idempotencyKey: t.value.idempotencyKey,
                  steps: t.value.steps.map(stepOf),
                }
              : undefined,
        });
      const where = `workspace "${req.workspaceId.slice(0, 140)}"`;
      const schedule = await audited(ctx, "schedule.create", where, create, target);
      return { apiVersion, schedule: scheduleMessage(schedule) };
    },
    async getSchedule(req) {
      return { apiVersion, schedule: scheduleMessage(await schedules.get(req.scheduleId)) };
    },
    async listSchedules(req) {
      return {
        apiVersion,
        schedules: (await schedules.list(req.workspaceId)).map(scheduleMessage),
      };
    },
    async pauseSchedule(req, ctx) {
      const pause = () => schedules.pause(req.scheduleId, principalOf(ctx).spiffeId.text);
      const s = await audited(ctx, "schedule.pause", named(req.scheduleId), pause, target);
      return { apiVersion, schedule: scheduleMessage(s) };
    },
    async resumeSchedule(req, ctx) {
      const resume = () => schedules.resume(req.scheduleId);
      const s = await audited(ctx, "schedule.resume", named(req.scheduleId), resume, target);
      return { apiVersion, schedule: scheduleMessage(s) };
    },
    async deleteSchedule(req, ctx) {
      const remove = () => schedules.delete(req.scheduleId);
      const s = await audited(ctx, "schedule.delete", named(req.scheduleId), remove, (v) => ({
        target: target(v).target,
        reason: `schedule ${String(v.id)} deleted`,
      }));
      return { apiVersion, schedule: scheduleMessage(s) };
    },
    async runSchedule(req, ctx) {
      const run = () => schedules.runNow(req.scheduleId, principalOf(ctx).spiffeId.text);
      const fire = await audited(ctx, "schedule.run", named(req.scheduleId), run, (f) => ({
        target: named(req.scheduleId),
        reason: `fired: ${String(f.outcome)}${f.jobId ? ` job ${String(f.jobId)}` : ""}`,
      }));
      return { apiVersion, fire: decodeJson(ScheduleFireSchema, fire as JsonValue) };
    },
  };
}

function scheduleMessage(view: ScheduleView) {
  return decodeJson(ScheduleSchema, view as JsonValue);
}
