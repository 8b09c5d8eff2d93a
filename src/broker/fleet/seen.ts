import { sql, type Kysely, type RawBuilder, type SqlBool } from "kysely";
import type { Database } from "../../store/schema.js";

/**
 * The runners row of (workspaceId, runnerId) was last seen over a second ago: the condition of
 * every write of last_seen_at outside register and claim, so a runner's many renewals, reports and
 * writes move its row at most once a second (a row not matched is not locked or written).
 */
export function runnerSeenStale(
  workspaceId: RawBuilder<string> | string,
  runnerId: RawBuilder<string> | string,
): RawBuilder<SqlBool> {
  return sql<SqlBool>`runners.workspace_id = ${workspaceId} and runners.runner_id = ${runnerId}
    and runners.last_seen_at < now() - interval '1 second'`;
}

/** Records that a runner was heard from (an inventory report, a stream write): runnerSeenStale's. */
export async function touchRunner(
  db: Kysely<Database>,
  workspaceId: string,
  runnerId: string,
): Promise<void> {
  await sql`update runners set last_seen_at = now()
    where ${runnerSeenStale(workspaceId, runnerId)}`.execute(db);
}
