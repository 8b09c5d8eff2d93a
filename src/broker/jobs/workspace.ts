import type { Kysely } from "kysely";
import type { Database } from "../../store/schema.js";

const uuidPattern = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * Whose a job is: its workspace and the SPIFFE ID that enqueued it (empty for jobs older than that
 * record).
 */
export interface JobOwnership {
  readonly workspaceId: string;
  readonly enqueuedBy: string;
}

/**
 * The workspace and enqueuer of a job (or of a pipeline, or the creator of a schedule: the ids
 * never collide), or undefined when there is no such job
 * (or the id is not one): what a workspace-scoped role, and the enqueuer's
 * right to its own job, are checked against for methods that name a job.
 */
export async function jobOwnership(
  db: Kysely<Database>,
  jobId: string,
): Promise<JobOwnership | undefined> {
  if (!uuidPattern.test(jobId)) return undefined;
  const id = jobId.toLowerCase();
  const row =
    (await db
      .selectFrom("jobs")
      .select(["workspace_id", "enqueued_by"])
      .where("id", "=", id)
      .executeTakeFirst()) ??
    (await db
      .selectFrom("pipelines")
      .select(["workspace_id", "enqueued_by"])
      .where("id", "=", id)
      .executeTakeFirst()) ??
    (await db
      .selectFrom("schedules")
      .select(["workspace_id", "created_by as enqueued_by"])
      .where("id", "=", id)
      .executeTakeFirst());
  return row && { workspaceId: row.workspace_id, enqueuedBy: row.enqueued_by ?? "" };
}
