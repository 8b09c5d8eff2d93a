import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import {
  InventoryFlagSchema,
  ReapOrderRecordSchema,
  type InventoryFlag,
  type ReapOrderRecord,
} from "../../gen/forelead/admin/v1/admin_pb.js";
import { InventoryItemSchema, type InventoryItem } from "../../gen/forelead/runner/v1/runner_pb.js";
import type { InventoryFlag as FlagView } from "../inventory/cross-check.js";
import type { ReapOrderView } from "../inventory/reap-orders.js";
import type { StoredItem } from "../inventory/views.js";

/** The proto InventoryItem of a stored item. */
export function inventoryItemMessage(item: StoredItem): InventoryItem {
  return create(InventoryItemSchema, {
    kind: item.kind,
    name: item.name,
    jobId: item.jobId,
    state: item.state,
    image: item.image,
    createdAt: item.createdAt ? timestampFromDate(item.createdAt) : undefined,
    cpu: item.cpu,
    memory: BigInt(item.memory),
    orphan: item.orphan,
  });
}

/** The proto InventoryFlag of a flag. */
export function inventoryFlagMessage(flag: FlagView): InventoryFlag {
  return create(InventoryFlagSchema, {
    problem: flag.problem,
    jobId: flag.jobId,
    kind: flag.kind ?? "",
    name: flag.name ?? "",
    message: flag.message,
  });
}

/** The proto ReapOrderRecord of an order. */
export function reapOrderMessage(order: ReapOrderView): ReapOrderRecord {
  return create(ReapOrderRecordSchema, {
    id: String(order.id),
    runnerId: order.runnerId,
    workspaceId: order.workspaceId,
    kind: order.kind,
    name: order.name,
    jobId: order.jobId,
    orderedBy: order.orderedBy,
    orderedAt: timestampFromDate(order.orderedAt),
    state: order.state,
    settledAt: order.settledAt ? timestampFromDate(order.settledAt) : undefined,
  });
}
