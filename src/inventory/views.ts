import type { Kysely, Selectable } from "kysely";
import type { Database, InventoryFlagsTable, InventoryItemsTable } from "../store/schema.js";
import type { InventoryFlag } from "./cross-check.js";
import { orderView, type ReapOrderView } from "./reap-orders.js";

/** Which runners to show; empty strings mean "any". */
export interface InventoryFilter {
  readonly runnerId: string;
  readonly workspaceId: string;
}

/** A stored item of a runner's latest report. */
export interface StoredItem {
  readonly kind: string;
  readonly name: string;
  readonly jobId: string;
  readonly state: string;
  readonly image: string;
  readonly createdAt: Date | null;
  readonly cpu: number;
  readonly memory: number;
  readonly orphan: boolean;
}

/** A runner's latest report with its flags and pending orders, for operators. */
export interface RunnerInventoryView {
  readonly runnerId: string;
  readonly workspaceId: string;
  readonly reportedAt: Date;
  readonly items: readonly StoredItem[];
  readonly flags: readonly InventoryFlag[];
  readonly pendingOrders: readonly ReapOrderView[];
}

/** An orphan in a runner's latest report, with the pending order on it if any. */
export interface OrphanView {
  readonly runnerId: string;
  readonly workspaceId: string;
  readonly reportedAt: Date;
  readonly item: StoredItem;
  readonly pendingOrder: ReapOrderView | undefined;
}

const runnerKey = (workspaceId: string, runnerId: string) => `${workspaceId}\u0000${runnerId}`;

/** The latest report of every runner the filter selects, ordered by workspace and runner. */
export async function listInventory(
  db: Kysely<Database>,
  filter: InventoryFilter,
): Promise<RunnerInventoryView[]> {
  const runner = filter.runnerId;
  const workspace = filter.workspaceId;
  // Four reads in one snapshot, so items, flags and orders belong to the same reports.
  const [reports, items, flags, orders] = await db
    .transaction()
    .setIsolationLevel("repeatable read")
    .execute(
      async (tx) =>
        [
          await tx
            .selectFrom("inventory_reports")
            .selectAll()
            .$if(!!runner, (q) => q.where("runner_id", "=", runner))
            .$if(!!workspace, (q) => q.where("workspace_id", "=", workspace))
            .orderBy("workspace_id")
            .orderBy("runner_id")
            .execute(),
          await tx
            .selectFrom("inventory_items")
            .selectAll()
            .$if(!!runner, (q) => q.where("runner_id", "=", runner))
            .$if(!!workspace, (q) => q.where("workspace_id", "=", workspace))
            .orderBy("kind")
            .orderBy("name")
            .execute(),
          await tx
            .selectFrom("inventory_flags")
            .selectAll()
            .$if(!!runner, (q) => q.where("runner_id", "=", runner))
            .$if(!!workspace, (q) => q.where("workspace_id", "=", workspace))
            .orderBy("id")
            .execute(),
          await tx
            .selectFrom("reap_orders")
            .selectAll()
            .where("state", "=", "pending")
            .$if(!!runner, (q) => q.where("runner_id", "=", runner))
            .$if(!!workspace, (q) => q.where("workspace_id", "=", workspace))
            .orderBy("id")
            .execute(),
        ] as const,
    );
  const views = new Map<
    string,
    { items: StoredItem[]; flags: InventoryFlag[]; pendingOrders: ReapOrderView[] }
  >();
  for (const r of reports)
    views.set(runnerKey(r.workspace_id, r.runner_id), { items: [], flags: [], pendingOrders: [] });
  for (const i of items) views.get(runnerKey(i.workspace_id, i.runner_id))?.items.push(itemView(i));
  for (const f of flags) views.get(runnerKey(f.workspace_id, f.runner_id))?.flags.push(flagView(f));
  for (const o of orders)
    views.get(runnerKey(o.workspace_id, o.runner_id))?.pendingOrders.push(orderView(o));
  return reports.map((r) => ({
    runnerId: r.runner_id,
    workspaceId: r.workspace_id,
    reportedAt: r.reported_at,
    ...views.get(runnerKey(r.workspace_id, r.runner_id))!,
  }));
}

/** Every item the selected runners' latest reports call orphan. */
export async function listOrphans(
  db: Kysely<Database>,
  filter: InventoryFilter,
): Promise<OrphanView[]> {
  let query = db
    .selectFrom("inventory_items as i")
    .innerJoin("inventory_reports as r", (j) =>
      j.onRef("r.workspace_id", "=", "i.workspace_id").onRef("r.runner_id", "=", "i.runner_id"),
    )
    .leftJoin("reap_orders as o", (j) =>
      j
        .onRef("o.workspace_id", "=", "i.workspace_id")
        .onRef("o.runner_id", "=", "i.runner_id")
        .onRef("o.kind", "=", "i.kind")
        .onRef("o.name", "=", "i.name")
        .on("o.state", "=", "pending"),
    )
    .selectAll("i")
    .select(["r.reported_at", "o.id as order_id"])
    .where("i.orphan", "=", true)
    .orderBy("i.workspace_id")
    .orderBy("i.runner_id")
    .orderBy("i.kind")
    .orderBy("i.name");
  if (filter.runnerId) query = query.where("i.runner_id", "=", filter.runnerId);
  if (filter.workspaceId) query = query.where("i.workspace_id", "=", filter.workspaceId);
  const rows = await query.execute();
  const orderIds = rows.flatMap((r) => (r.order_id === null ? [] : [r.order_id]));
  const orders =
    orderIds.length > 0
      ? await db.selectFrom("reap_orders").selectAll().where("id", "in", orderIds).execute()
      : [];
  const byId = new Map(orders.map((o) => [o.id, orderView(o)]));
  return rows.map((r) => ({
    runnerId: r.runner_id,
    workspaceId: r.workspace_id,
    reportedAt: r.reported_at,
    item: itemView(r),
    pendingOrder: r.order_id === null ? undefined : byId.get(r.order_id),
  }));
}

function itemView(row: Selectable<InventoryItemsTable>): StoredItem {
  return {
    kind: row.kind,
    name: row.name,
    jobId: row.job_id,
    state: row.state,
    image: row.image,
    createdAt: row.created_at,
    cpu: row.cpu,
    memory: row.memory,
    orphan: row.orphan,
  };
}

function flagView(row: Selectable<InventoryFlagsTable>): InventoryFlag {
  return {
    problem: row.problem,
    jobId: row.job_id,
    kind: row.kind ?? undefined,
    name: row.name ?? undefined,
    message: row.message,
  };
}
