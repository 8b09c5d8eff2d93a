import { sql, type Kysely } from "kysely";

/**
 * Runner inventory and reap orders. Only the latest report of each runner is
 * kept: its row in inventory_reports, its items, and the flags the control
 * plane raised when it checked the report against the runner's leases. Reap
 * orders are kept for good, with who ordered them and what became of them.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable("inventory_reports")
    .addColumn("workspace_id", "text", (c) => c.notNull())
    .addColumn("runner_id", "text", (c) => c.notNull())
    .addColumn("reported_at", "timestamptz", (c) => c.notNull())
    .addColumn("item_count", "integer", (c) => c.notNull())
    .addPrimaryKeyConstraint("inventory_reports_pkey", ["workspace_id", "runner_id"])
    .execute();

  await db.schema
    .createTable("inventory_items")
    .addColumn("workspace_id", "text", (c) => c.notNull())
    .addColumn("runner_id", "text", (c) => c.notNull())
    .addColumn("kind", "text", (c) => c.notNull().check(sql`kind in ('container', 'network')`))
    .addColumn("name", "text", (c) => c.notNull())
    .addColumn("job_id", "uuid", (c) => c.notNull())
    .addColumn("state", "text", (c) => c.notNull())
    .addColumn("image", "text", (c) => c.notNull())
    .addColumn("created_at", "timestamptz")
    .addColumn("cpu", "double precision", (c) => c.notNull())
    .addColumn("memory", "bigint", (c) => c.notNull())
    .addColumn("orphan", "boolean", (c) => c.notNull())
    .addPrimaryKeyConstraint("inventory_items_pkey", ["workspace_id", "runner_id", "kind", "name"])
    .execute();
  await sql`create index inventory_items_orphans on inventory_items (workspace_id, runner_id) where orphan`.execute(
    db,
  );

  await db.schema
    .createTable("inventory_flags")
    .addColumn("id", "bigserial", (c) => c.primaryKey())
    .addColumn("workspace_id", "text", (c) => c.notNull())
    .addColumn("runner_id", "text", (c) => c.notNull())
    .addColumn("problem", "text", (c) =>
      c
        .notNull()
        .check(
          sql`problem in ('job_not_leased_here', 'orphan_of_live_lease', 'lease_without_container')`,
        ),
    )
    .addColumn("job_id", "uuid", (c) => c.notNull())
    .addColumn("kind", "text")
    .addColumn("name", "text")
    .addColumn("message", "text", (c) => c.notNull())
    .execute();
  await db.schema
    .createIndex("inventory_flags_runner")
    .on("inventory_flags")
    .columns(["workspace_id", "runner_id"])
    .execute();

  await db.schema
    .createTable("reap_orders")
    .addColumn("id", "bigserial", (c) => c.primaryKey())
    .addColumn("workspace_id", "text", (c) => c.notNull())
    .addColumn("runner_id", "text", (c) => c.notNull())
    .addColumn("kind", "text", (c) => c.notNull())
    .addColumn("name", "text", (c) => c.notNull())
    .addColumn("job_id", "uuid", (c) => c.notNull())
    .addColumn("ordered_by", "text", (c) => c.notNull())
    .addColumn("ordered_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn("state", "text", (c) =>
      c
        .notNull()
        .defaultTo("pending")
        .check(sql`state in ('pending', 'done', 'expired')`),
    )
    .addColumn("settled_at", "timestamptz")
    .execute();
  // One pending order per item: ordering it again returns the pending one.
  await sql`create unique index reap_orders_pending on reap_orders (workspace_id, runner_id, kind, name) where state = 'pending'`.execute(
    db,
  );
  await sql`create index reap_orders_newest on reap_orders (ordered_at desc, id desc)`.execute(db);
}
