import type { ServiceImpl } from "@connectrpc/connect";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { AdminService } from "../../gen/forelead/admin/v1/admin_pb.js";
import type { Inventory } from "../inventory/inventory.js";
import { principalOf } from "./context.js";
import { inventoryFlagMessage, inventoryItemMessage, reapOrderMessage } from "./inventory-view.js";
import { apiVersion } from "./request-rules.js";

type InventoryMethods = Pick<ServiceImpl<typeof AdminService>, "listInventory" | "listOrphans" | "orderReap" | "listReapOrders">;

/** The admin methods of runner inventory and reap orders: decode, call the inventory, encode. */
export function createInventoryAdminMethods(inventory: Inventory): InventoryMethods {
  return {
    async listInventory(req) {
      const reports = await inventory.reports({ runnerId: req.runnerId, workspaceId: req.workspaceId });
      return {
        apiVersion,
        reports: reports.map((r) => ({
          runnerId: r.runnerId,
          workspaceId: r.workspaceId,
          reportedAt: timestampFromDate(r.reportedAt),
          items: r.items.map(inventoryItemMessage),
          flags: r.flags.map(inventoryFlagMessage),
          pendingOrders: r.pendingOrders.map(reapOrderMessage),
        })),
      };
    },
    async listOrphans(req) {
      const orphans = await inventory.orphans({ runnerId: req.runnerId, workspaceId: req.workspaceId });
      return {
        apiVersion,
        orphans: orphans.map((o) => ({
          runnerId: o.runnerId,
          workspaceId: o.workspaceId,
          reportedAt: timestampFromDate(o.reportedAt),
          item: inventoryItemMessage(o.item),
          ...(o.pendingOrder ? { pendingOrder: reapOrderMessage(o.pendingOrder) } : {}),
        })),
      };
    },
    async orderReap(req, ctx) {
      const order = await inventory.order({
        runnerId: req.runnerId,
        workspaceId: req.workspaceId,
        kind: req.kind,
        name: req.name,
        orderedBy: principalOf(ctx).spiffeId.text,
      });
      return { apiVersion, order: reapOrderMessage(order) };
    },
    async listReapOrders(req) {
      const orders = await inventory.orders({ runnerId: req.runnerId, workspaceId: req.workspaceId, state: req.state, pageSize: req.pageSize });
      return { apiVersion, orders: orders.map(reapOrderMessage) };
    },
  };
}
