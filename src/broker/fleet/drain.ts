import { sql, type Kysely } from "kysely";
import type { Database } from "../../store/schema.js";
import { recordEvent } from "../../events/record.js";
import { resumeChannel } from "../leases/wakeups.js";
import { registeredWorkspace } from "./pauses.js";

/** An admin's order that a registered runner drain. */
export interface DrainInput {
  readonly runnerId: string;
  /** May be empty when the runner id is registered in one workspace only. */
  readonly workspaceId: string;
  /** The admin's SPIFFE ID. */
  readonly by: string;
}

/** The drain as it stands. */
export interface DrainState {
  readonly workspaceId: string;
  readonly drainingAt: Date;
  /** False when a drain was ordered already. */
  readonly changed: boolean;
}

/**
 * Orders a runner to drain: runners.draining_at (its state is draining, and forelead_claim gives
 * it no lease) and drain_ordered_by (kept when it registers again, and what its renew and claim
 * replies report). Wakes the workspace's waiting claims, so the runner's own claim answers at once.
 */
export async function orderDrain(db: Kysely<Database>, input: DrainInput): Promise<DrainState> {
  return db.transaction().execute(async (tx) => {
    const workspaceId = await registeredWorkspace(tx, input);
    const row = await tx
      .updateTable("runners")
      .set({ draining_at: sql`coalesce(draining_at, now())`, drain_ordered_by: input.by })
      .where("workspace_id", "=", workspaceId)
      .where("runner_id", "=", input.runnerId)
      .where("drain_ordered_by", "is", null)
      .returning("draining_at")
      .executeTakeFirst();
    if (row) {
      await recordEvent(tx, {
        type: "runner.drain_ordered",
        workspaceId,
        runnerId: input.runnerId,
        data: { by: input.by },
      });
      await sql`select pg_notify(${resumeChannel}, ${workspaceId})`.execute(tx);
      return { workspaceId, drainingAt: row.draining_at!, changed: true };
    }
    const current = await tx
      .selectFrom("runners")
      .select("draining_at")
      .where("workspace_id", "=", workspaceId)
      .where("runner_id", "=", input.runnerId)
      .executeTakeFirstOrThrow();
    return { workspaceId, drainingAt: current.draining_at!, changed: false };
  });
}

/** Whether the runner was ordered to drain (one primary-key read). */
export async function drainOrdered(
  db: Kysely<Database>,
  runner: { readonly workspaceId: string; readonly runnerId: string },
): Promise<boolean> {
  const row = await db
    .selectFrom("runners")
    .select("drain_ordered_by")
    .where("workspace_id", "=", runner.workspaceId)
    .where("runner_id", "=", runner.runnerId)
    .executeTakeFirst();
  return row?.drain_ordered_by != null;
}
