import type { Kysely } from "kysely";
import type { Database } from "../store/schema.js";
import type { InventoryHolder } from "./cross-check.js";
import {
  listReapOrders,
  orderReap,
  type ListReapOrdersInput,
  type ReapOrderInput,
  type ReapOrderView,
} from "./reap-orders.js";
import type { ReportedItem } from "./report.js";
import { acceptReport, type ReportOutcome } from "./reports.js";
import {
  listInventory,
  listOrphans,
  type InventoryFilter,
  type OrphanView,
  type RunnerInventoryView,
} from "./views.js";

/** Runner inventory reports and reap orders, against the shared database. */
export interface Inventory {
  /** Stores a runner's report as its latest and answers with its pending reap orders. */
  report(holder: InventoryHolder, items: readonly ReportedItem[]): Promise<ReportOutcome>;
  /** The latest reports, with flags and pending orders. */
  reports(filter: InventoryFilter): Promise<RunnerInventoryView[]>;
  orphans(filter: InventoryFilter): Promise<OrphanView[]>;
  order(input: ReapOrderInput): Promise<ReapOrderView>;
  orders(input: ListReapOrdersInput): Promise<ReapOrderView[]>;
}

/**
 * The inventory over `db`; it holds no state of its own, so any number of replicas may share the
 * database.
 */
export function createInventory(db: Kysely<Database>): Inventory {
  return {
    report: (holder, items) => acceptReport(db, holder, items),
    reports: (filter) => listInventory(db, filter),
    orphans: (filter) => listOrphans(db, filter),
    order: (input) => orderReap(db, input),
    orders: (input) => listReapOrders(db, input),
  };
}
