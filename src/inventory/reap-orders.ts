import { Code, ConnectError } from "@connectrpc/connect";
import { sql, type Kysely, type Selectable, type Transaction } from "kysely";
import type { Database, ReapOrderState, ReapOrdersTable } from "../store/schema.js";
import type { InventoryHolder } from "./cross-check.js";
import { parseLauncherName, type LauncherKind } from "./names.js";
import type { InventoryItem } from "./report.js";

/** A reap order and what became of it. */
export interface ReapOrderView {
  readonly id: number;
  readonly runnerId: string;
  readonly workspaceId: string;
  readonly kind: string;
  readonly name: string;
  readonly jobId: string;
  /** The SPIFFE ID of the administrator who ordered it. */
  readonly orderedBy: string;
  readonly orderedAt: Date;
  readonly state: ReapOrderState;
  readonly settledAt: Date | null;
}

/** What an administrator asks to remove. */
export interface ReapOrderInput {
  readonly runnerId: string;
  /** Empty when the runner id names a runner in one workspace only. */
  readonly workspaceId: string;
  readonly kind: string;
  readonly name: string;
  /** The SPIFFE ID of the caller, from its certificate. */
  readonly orderedBy: string;
}

/** What the runner is told to remove: pending orders, oldest first. */
export interface ReapInstruction {
  readonly kind: string;
  readonly name: string;
}

const orderStates = new Set<string>(["pending", "done", "expired"]);

/**
 * Records an order to remove one orphan. Accepted only when the runner's
 * latest report lists the item and calls it orphan; an item already under a
 * pending order gets that order back (ordering twice is harmless). The
 * report row is locked, so a report arriving at the same time is processed
 * wholly before or after the order.
 */
export async function orderReap(
  db: Kysely<Database>,
  input: ReapOrderInput,
): Promise<ReapOrderView> {
  if (!input.runnerId)
    throw new ConnectError(
      "runnerId is required: the runner whose orphan to remove",
      Code.InvalidArgument,
    );
  if (!input.kind || !input.name)
    throw new ConnectError(
      "kind and name are required: the orphan as the runner's report lists it",
      Code.InvalidArgument,
    );
  const parsed = parseLauncherName(input.kind, input.name);
  if (!parsed.ok)
    throw new ConnectError(
      `${parsed.reason}; a runner reports only launcher names (docs/launcher-names.md)`,
      Code.InvalidArgument,
    );
  return db.transaction().execute(async (tx) => {
    let reports = tx
      .selectFrom("inventory_reports")
      .selectAll()
      .where("runner_id", "=", input.runnerId);
    if (input.workspaceId) reports = reports.where("workspace_id", "=", input.workspaceId);
    const found = await reports.forUpdate().execute();
    const where = input.workspaceId ? ` in workspace "${input.workspaceId}"` : "";
    if (found.length === 0)
      throw new ConnectError(
        `runner "${input.runnerId}"${where} has sent no inventory report`,
        Code.NotFound,
      );
    if (found.length > 1) {
      const spaces = found.map((r) => `"${r.workspace_id}"`).join(", ");
      throw new ConnectError(
        `runner id "${input.runnerId}" reports in workspaces ${spaces}; give workspaceId`,
        Code.InvalidArgument,
      );
    }
    const report = found[0]!;
    const holder = { workspaceId: report.workspace_id, runnerId: report.runner_id };
    const latest = `runner "${holder.runnerId}"'s latest report (at ${report.reported_at.toISOString()})`;
    const item = await tx
      .selectFrom("inventory_items")
      .select(["orphan", "job_id"])
      .where("workspace_id", "=", holder.workspaceId)
      .where("runner_id", "=", holder.runnerId)
      .where("kind", "=", parsed.kind)
      .where("name", "=", input.name)
      .executeTakeFirst();
    if (!item)
      throw new ConnectError(
        `${latest} does not list ${parsed.kind} ${input.name}; only an orphan in ` +
          `the latest report can be ordered removed`,
        Code.FailedPrecondition,
      );
    if (!item.orphan) {
      throw new ConnectError(
        `${latest} does not call ${parsed.kind} ${input.name} an orphan; the runner removes only what it calls orphan`,
        Code.FailedPrecondition,
      );
    }
    const pending = await pendingOrderRows(tx, holder)
      .where("kind", "=", parsed.kind)
      .where("name", "=", input.name)
      .executeTakeFirst();
    if (pending) return orderView(pending);
    const row = await tx
      .insertInto("reap_orders")
      .values({
        ...toKey(holder, parsed.kind, input.name),
        job_id: item.job_id,
        ordered_by: input.orderedBy,
      })
      .returningAll()
      .executeTakeFirstOrThrow();
    return orderView(row);
  });
}

/**
 * Settles this runner's pending orders against its new report: an order
 * whose item the report no longer lists is done; one whose item is listed
 * but no longer called orphan has expired (the runner would refuse it).
 */
export async function settleOrders(
  tx: Transaction<Database>,
  holder: InventoryHolder,
  items: readonly InventoryItem[],
): Promise<void> {
  const pending = await pendingOrderRows(tx, holder).execute();
  if (pending.length === 0) return;
  const listed = new Map(items.map((i) => [`${i.kind}/${i.name}`, i]));
  const done: number[] = [];
  const expired: number[] = [];
  for (const order of pending) {
    const item = listed.get(`${order.kind}/${order.name}`);
    if (!item) done.push(order.id);
    else if (!item.orphan) expired.push(order.id);
  }
  for (const [state, ids] of [
    ["done", done],
    ["expired", expired],
  ] as const) {
    if (ids.length > 0)
      await tx
        .updateTable("reap_orders")
        .set({ state, settled_at: sql<Date>`now()` })
        .where("id", "in", ids)
        .execute();
  }
}

/** The orders a runner is to carry out: only its own, in its own workspace. */
export async function pendingInstructions(
  tx: Transaction<Database>,
  holder: InventoryHolder,
): Promise<ReapInstruction[]> {
  const rows = await pendingOrderRows(tx, holder).execute();
  return rows.map((r) => ({ kind: r.kind, name: r.name }));
}

/** Filters of listReapOrders; empty strings mean "any". */
export interface ListReapOrdersInput {
  readonly runnerId: string;
  readonly workspaceId: string;
  readonly state: string;
  /** 1..500; 0 means 100. */
  readonly pageSize: number;
}

/** Reap orders, newest first. */
export async function listReapOrders(
  db: Kysely<Database>,
  input: ListReapOrdersInput,
): Promise<ReapOrderView[]> {
  if (input.state && !orderStates.has(input.state)) {
    throw new ConnectError(
      `state ${JSON.stringify(input.state)} is not pending, done or expired`,
      Code.InvalidArgument,
    );
  }
  if (!Number.isInteger(input.pageSize) || input.pageSize < 0 || input.pageSize > 500) {
    throw new ConnectError(
      `pageSize must be 1 to 500; got ${input.pageSize}`,
      Code.InvalidArgument,
    );
  }
  let query = db
    .selectFrom("reap_orders")
    .selectAll()
    .orderBy("ordered_at", "desc")
    .orderBy("id", "desc")
    .limit(input.pageSize || 100);
  if (input.runnerId) query = query.where("runner_id", "=", input.runnerId);
  if (input.workspaceId) query = query.where("workspace_id", "=", input.workspaceId);
  if (input.state) query = query.where("state", "=", input.state as ReapOrderState);
  return (await query.execute()).map(orderView);
}

/** A stored order as operators see it. */
export function orderView(row: Selectable<ReapOrdersTable>): ReapOrderView {
  return {
    id: row.id,
    runnerId: row.runner_id,
    workspaceId: row.workspace_id,
    kind: row.kind,
    name: row.name,
    jobId: row.job_id,
    orderedBy: row.ordered_by,
    orderedAt: row.ordered_at,
    state: row.state,
    settledAt: row.settled_at,
  };
}

function pendingOrderRows(db: Kysely<Database> | Transaction<Database>, holder: InventoryHolder) {
  return db
    .selectFrom("reap_orders")
    .selectAll()
    .where("workspace_id", "=", holder.workspaceId)
    .where("runner_id", "=", holder.runnerId)
    .where("state", "=", "pending")
    .orderBy("id");
}

function toKey(holder: InventoryHolder, kind: LauncherKind, name: string) {
  return { workspace_id: holder.workspaceId, runner_id: holder.runnerId, kind, name };
}
