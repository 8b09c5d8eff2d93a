import type { ServiceImpl } from "@connectrpc/connect";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { AdminService } from "../../gen/forelead/admin/v1/admin_pb.js";
import type { Inventory } from "../inventory/inventory.js";
import { audited } from "./audit-actions.js";
import { principalOf } from "./context.js";
import { inventoryFlagMessage, inventoryItemMessage, reapOrderMessage } from "./inventory-view.js";
import { apiVersion } from "./request-rules.js";

type InventoryMethods = Pick<
  ServiceImpl<typeof AdminService>,
  "listInventory" | "listOrphans" | "orderReap" | "listReapOrders"
>;

/** The admin methods of runner inventory and reap orders: decode, call the inventory, encode. */
export function createInventoryAdminMethods(inventory: Inventory): InventoryMethods {
  return {
    async listInventory(req) {
      const reports = await inventory.reports({
        runnerId: req.runnerId,
        workspaceId: req.workspaceId,
      });
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
      const orphans = await inventory.orphans({
        runnerId: req.runnerId,
        workspaceId: req.workspaceId,
      });
      return {
        apiVersion,
        orphans: orphans.map((o) => ({
          runnerId: o.runnerId,
          workspaceId: o.workspaceId,
          reportedAt: timestampFromDate(o.reportedAt),
          item: inventoryItemMessage(o.item),
          pendingOrder: o.pendingOrder ? reapOrderMessage(o.pendingOrder) : undefined,
        })),
      };
    },
    async orderReap(req, ctx) {
      const what =
        `${req.kind.slice(0, 20)} ${JSON.stringify(req.name.slice(0, 200))} of ` +
        `runner "${req.runnerId.slice(0, 140)}"`;
      const place = () =>
        inventory.order({
          runnerId: req.runnerId,
          workspaceId: req.workspaceId,
          kind: req.kind,
          name: req.name,
          orderedBy: principalOf(ctx).spiffeId.text,
        });
      const order = await audited(ctx, "reap.order", `reap ${what}`, place, (o) => ({
        target: `reap order ${o.id}: ${o.kind} ${o.name} of runner "${o.runnerId}" in workspace "${o.workspaceId}"`,
        reason: `reap order ${o.id} is ${o.state}`,
      }));
      return { apiVersion, order: reapOrderMessage(order) };
    },
    async listReapOrders(req) {
      const orders = await inventory.orders({
        runnerId: req.runnerId,
        workspaceId: req.workspaceId,
        state: req.state,
        pageSize: req.pageSize,
      });
      return { apiVersion, orders: orders.map(reapOrderMessage) };
    },
  };
}
