import type { Kysely } from "kysely";
import type { Database } from "../../store/schema.js";
import type { LeaseHolder } from "../leases/check.js";

/**
 * The protocol features a runner declared when it registered (its
 * registration's `features`, runners.features): the one place the suspend
 * rules read them from.
 */
export async function declaredFeatures(
  db: Kysely<Database>,
  holder: LeaseHolder,
): Promise<string[]> {
  const row = await db
    .selectFrom("runners")
    .select("features")
    .where("workspace_id", "=", holder.workspaceId)
    .where("runner_id", "=", holder.runnerId)
    .executeTakeFirst();
  return row?.features ?? [];
}
