import { sql, type Kysely, type Transaction } from "kysely";
import type { Database } from "../store/schema.js";
import { touchRunner } from "../broker/fleet/seen.js";
import { crossCheck, type InventoryFlag, type InventoryHolder } from "./cross-check.js";
import { pendingInstructions, settleOrders, type ReapInstruction } from "./reap-orders.js";
import { validateReport, type InventoryItem, type ReportedItem } from "./report.js";

/** What the control plane answers a report with. */
export interface ReportOutcome {
  /** When the report was stored (database clock). */
  readonly reportedAt: Date;
  /** This runner's pending reap orders, after the report settled what it could. */
  readonly reap: readonly ReapInstruction[];
  readonly flags: readonly InventoryFlag[];
}

/**
 * Stores a runner's report as its latest, all or nothing: a report with any
 * bad item is refused before the database is touched. In one transaction:
 * the runner's report row is upserted first (which locks it, so two reports
 * of one runner, or a report and a reap order on its items, never
 * interleave), then pending orders are settled against the new items, the
 * items and flags are replaced, and the pending orders are read for the reply.
 */
export async function acceptReport(
  db: Kysely<Database>,
  holder: InventoryHolder,
  reported: readonly ReportedItem[],
): Promise<ReportOutcome> {
  const items = validateReport(reported);
  return db.transaction().execute(async (tx) => {
    const report = await tx
      .insertInto("inventory_reports")
      .values({
        workspace_id: holder.workspaceId,
        runner_id: holder.runnerId,
        reported_at: sql`now()`,
        item_count: items.length,
      })
      .onConflict((oc) =>
        oc
          .columns(["workspace_id", "runner_id"])
          .doUpdateSet({ reported_at: sql`now()`, item_count: items.length }),
      )
      .returning("reported_at")
      .executeTakeFirstOrThrow();
    await touchRunner(tx, holder.workspaceId, holder.runnerId);
    await settleOrders(tx, holder, items);
    await replaceItems(tx, holder, items);
    const flags = await crossCheck(tx, holder, items);
    await replaceFlags(tx, holder, flags);
    return { reportedAt: report.reported_at, reap: await pendingInstructions(tx, holder), flags };
  });
}

async function deleteForRunner(
  tx: Transaction<Database>,
  table: "inventory_items" | "inventory_flags",
  holder: InventoryHolder,
): Promise<void> {
  await sql`delete from ${sql.table(table)} where workspace_id = ${holder.workspaceId} and runner_id
    = ${holder.runnerId}`.execute(tx);
}

/**
 * Replaces the runner's items. The rows go in as one jsonb parameter
 * expanded by jsonb_to_recordset: a report may hold 10,000 items, and one
 * parameter per value would pass Postgres' 65,535-parameter limit.
 */
async function replaceItems(
  tx: Transaction<Database>,
  holder: InventoryHolder,
  items: readonly InventoryItem[],
): Promise<void> {
  await deleteForRunner(tx, "inventory_items", holder);
  if (items.length === 0) return;
  const rows = JSON.stringify(
    items.map((i) => ({
      kind: i.kind,
      name: i.name,
      job_id: i.jobId,
      state: i.state,
      image: i.image,
      created_at: i.createdAt?.toISOString() ?? null,
      cpu: i.cpu,
      memory: i.memory,
      orphan: i.orphan,
    })),
  );
  await sql`
    insert into inventory_items (workspace_id, runner_id, kind, name, job_id, state, image,
      created_at, cpu, memory, orphan)
    select ${holder.workspaceId}, ${holder.runnerId}, x.kind, x.name, x.job_id, x.state, x.image,
      x.created_at, x.cpu, x.memory, x.orphan
    from jsonb_to_recordset(${rows}::jsonb)
      as x(kind text, name text, job_id uuid, state text, image text, created_at timestamptz, cpu
        float8, memory int8, orphan boolean)`.execute(tx);
}

/** Replaces the runner's flags; as one jsonb parameter for the same reason as the items. */
async function replaceFlags(
  tx: Transaction<Database>,
  holder: InventoryHolder,
  flags: readonly InventoryFlag[],
): Promise<void> {
  await deleteForRunner(tx, "inventory_flags", holder);
  if (flags.length === 0) return;
  const rows = JSON.stringify(
    flags.map((f) => ({
      problem: f.problem,
      job_id: f.jobId,
      kind: f.kind ?? null,
      name: f.name ?? null,
      message: f.message,
    })),
  );
  await sql`
    insert into inventory_flags (workspace_id, runner_id, problem, job_id, kind, name, message)
    select ${holder.workspaceId}, ${holder.runnerId}, x.problem, x.job_id, x.kind, x.name, x.message
    from jsonb_to_recordset(${rows}::jsonb) as x(problem text, job_id uuid, kind text, name text,
      message text)`.execute(tx);
}
