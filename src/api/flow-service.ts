import type { ServiceImpl } from "@connectrpc/connect";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { FlowService } from "../../gen/forelead/admin/v1/flow_pb.js";
import type { Broker } from "../broker/broker.js";
import type { FairnessKeyView } from "../broker/jobs/fairness.js";
import type { RateLimitView } from "../broker/jobs/rate-limits.js";
import { audited } from "./audit-actions.js";
import { apiVersion } from "./request-rules.js";

/** FlowService: decode, call the broker, encode; a weight or a rate limit set is audited. */
export function createFlowService(
  broker: Pick<Broker, "setFairnessKey" | "fairnessKeys" | "setRateLimit" | "rateLimits">,
): ServiceImpl<typeof FlowService> {
  return {
    async setFairnessKey(req, ctx) {
      const target = `fairness key "${req.key.slice(0, 140)}" of workspace "${req.workspaceId.slice(0, 140)}"`;
      const key = await audited(
        ctx,
        "fairness_key.set",
        target,
        () =>
          broker.setFairnessKey({
            workspaceId: req.workspaceId,
            key: req.key,
            weight: req.weight,
          }),
        (k) => ({ reason: `weight ${k.weight}` }),
      );
      return { apiVersion, fairnessKey: fairnessKeyMessage(key) };
    },
    async listFairnessKeys(req) {
      const keys = await broker.fairnessKeys(req.workspaceId);
      return { apiVersion, fairnessKeys: keys.map(fairnessKeyMessage) };
    },
    async setRateLimit(req, ctx) {
      const limit = await audited(
        ctx,
        "rate_limit.set",
        `rate limit "${req.name.slice(0, 140)}"`,
        () =>
          broker.setRateLimit({
            name: req.name,
            perSecond: req.perSecond,
            perMinute: req.perMinute,
          }),
        (l) => ({ reason: l.perSecond ? `${l.perSecond}/s` : `${l.perMinute}/m` }),
      );
      return { apiVersion, rateLimit: rateLimitMessage(limit) };
    },
    async listRateLimits() {
      const limits = await broker.rateLimits();
      return { apiVersion, rateLimits: limits.map(rateLimitMessage) };
    },
  };
}

function fairnessKeyMessage(k: FairnessKeyView) {
  return {
    workspaceId: k.workspaceId,
    key: k.key,
    weight: k.weight,
    queued: k.queued,
    updatedAt: timestampFromDate(k.updatedAt),
  };
}

function rateLimitMessage(l: RateLimitView) {
  return {
    name: l.name,
    perSecond: l.perSecond ?? 0,
    perMinute: l.perMinute ?? 0,
    queued: l.queued,
    updatedAt: timestampFromDate(l.updatedAt),
  };
}
