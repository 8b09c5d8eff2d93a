import type { Kysely } from "kysely";
import type { Database } from "../store/schema.js";

const uuidPattern = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * The workspace of a job, or undefined when there is no such job (or the id
 * is not one): what a workspace-scoped role is checked against for methods
 * that name a job rather than a workspace.
 */
export async function jobWorkspace(db: Kysely<Database>, jobId: string): Promise<string | undefined> {
  if (!uuidPattern.test(jobId)) return undefined;
  const row = await db.selectFrom("jobs").select("workspace_id").where("id", "=", jobId.toLowerCase()).executeTakeFirst();
  return row?.workspace_id;
}
