import type { Kysely } from "kysely";

/**
 * The process a runner's registration came from (issue 18): `instance_id` is
 * random per runner process start, `instance_started_at` that process's own
 * start time. `runners.last_seen_at`, moved by register, claim and renew, is
 * the registered instance's: a second instance is refused at register while
 * it is recent (src/broker/registrations.ts), so only the registered one
 * claims. Rows from before are the unnamed instance ('').
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .alterTable("runners")
    .addColumn("instance_id", "text", (c) => c.notNull().defaultTo(""))
    .addColumn("instance_started_at", "timestamptz")
    .execute();
}
