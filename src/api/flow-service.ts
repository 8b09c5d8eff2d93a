import type { ServiceImpl } from "@connectrpc/connect";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { FlowService } from "../../gen/forelead/admin/v1/flow_pb.js";
import type { Broker } from "../broker/broker.js";
import type { FairnessKeyView } from "../broker/jobs/fairness.js";
import { audited } from "./audit-actions.js";
import { apiVersion } from "./request-rules.js";

/** FlowService: decode, call the broker, encode; a weight set is audited. */
export function createFlowService(
  broker: Pick<Broker, "setFairnessKey" | "fairnessKeys">,
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
