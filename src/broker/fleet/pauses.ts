import { Code, ConnectError } from "@connectrpc/connect";
import { sql, type Kysely, type Transaction } from "kysely";
import { recordEvent } from "../../events/record.js";
import { checkSegmentId } from "../../identity/segment-id.js";
import type { Database } from "../../store/schema.js";
import { resumeChannel } from "../leases/wakeups.js";

// Pause and resume (workspace_pauses and runners.paused_at hold the state,
// forelead_claim applies it through forelead_workspace_unpaused and
// forelead_runner_unpaused): a paused workspace's jobs are not claimed, a
// paused runner gets no new lease; live leases go on and settle either way.
// Each change writes its event in its transaction; a resume also NOTIFYs the
// resume channel, so waiting claims in the workspace on every replica claim
// again at once. Pausing twice (or resuming what is not paused) changes
// nothing and says so.

/** What a pause or resume did. */
export interface PauseState {
  readonly workspaceId: string;
  /** Set for a runner's pause. */
  readonly runnerId?: string;
  readonly paused: boolean;
  /** False when it was already in that state: nothing changed, no event. */
  readonly changed: boolean;
  readonly pausedAt?: Date;
  readonly pausedBy?: string;
  readonly reason?: string;
}

/** A pause request: who asks and why (kept in the row and the audit trail). */
interface PauseInput {
  readonly workspaceId: string;
  readonly by: string;
  readonly reason: string;
}

function checkReason(reason: string): void {
  if (reason.length > 1000)
    throw new ConnectError("reason is longer than 1000 characters", Code.InvalidArgument);
}

/**
 * Pauses a workspace. One that has no job or runner yet may be paused too:
 * pausing ahead of a rollout is useful, and nothing else names workspaces.
 */
async function pauseWorkspace(db: Kysely<Database>, input: PauseInput): Promise<PauseState> {
  checkSegmentId("workspaceId", input.workspaceId);
  checkReason(input.reason);
  return db.transaction().execute(async (tx) => {
    const inserted = await tx
      .insertInto("workspace_pauses")
      .values({ workspace_id: input.workspaceId, paused_by: input.by, reason: input.reason })
      .onConflict((oc) => oc.column("workspace_id").doNothing())
      .returningAll()
      .executeTakeFirst();
    if (inserted)
      await recordEvent(tx, {
        type: "workspace.paused",
        workspaceId: input.workspaceId,
        data: { by: input.by, reason: input.reason },
      });
    const row =
      inserted ??
      (await tx
        .selectFrom("workspace_pauses")
        .selectAll()
        .where("workspace_id", "=", input.workspaceId)
        .executeTakeFirstOrThrow());
    return {
      workspaceId: input.workspaceId,
      paused: true,
      changed: inserted !== undefined,
      pausedAt: row.paused_at,
      pausedBy: row.paused_by,
      reason: row.reason,
    };
  });
}

/** Resumes a workspace and wakes the claims waiting in it. */
async function resumeWorkspace(
  db: Kysely<Database>,
  input: Omit<PauseInput, "reason">,
): Promise<PauseState> {
  checkSegmentId("workspaceId", input.workspaceId);
  return db.transaction().execute(async (tx) => {
    const deleted = await tx
      .deleteFrom("workspace_pauses")
      .where("workspace_id", "=", input.workspaceId)
      .returningAll()
      .executeTakeFirst();
    if (deleted)
      await resumed(tx, {
        type: "workspace.resumed",
        workspaceId: input.workspaceId,
        data: { by: input.by },
      });
    return { workspaceId: input.workspaceId, paused: false, changed: deleted !== undefined };
  });
}

/**
 * A runner's pause request: the workspace may be left empty when the runner id is registered in one
 * only.
 */
interface RunnerPauseInput extends PauseInput {
  readonly runnerId: string;
}

/** Pauses a registered runner; one that never registered is refused (404) by name. */
async function pauseRunner(db: Kysely<Database>, input: RunnerPauseInput): Promise<PauseState> {
  checkReason(input.reason);
  return db.transaction().execute(async (tx) => {
    const workspaceId = await registeredWorkspace(tx, input);
    const row = await tx
      .updateTable("runners")
      .set({ paused_at: sql`now()`, paused_by: input.by })
      .where("workspace_id", "=", workspaceId)
      .where("runner_id", "=", input.runnerId)
      .where("paused_at", "is", null)
      .returning(["paused_at", "paused_by"])
      .executeTakeFirst();
    if (row)
      await recordEvent(tx, {
        type: "runner.paused",
        workspaceId,
        runnerId: input.runnerId,
        data: { by: input.by, reason: input.reason },
      });
    const current =
      row ??
      (await tx
        .selectFrom("runners")
        .select(["paused_at", "paused_by"])
        .where("workspace_id", "=", workspaceId)
        .where("runner_id", "=", input.runnerId)
        .executeTakeFirstOrThrow());
    return {
      workspaceId,
      runnerId: input.runnerId,
      paused: true,
      changed: row !== undefined,
      pausedAt: current.paused_at ?? undefined,
      pausedBy: current.paused_by ?? undefined,
    };
  });
}

/** Resumes a runner and wakes the claims waiting in its workspace (its own among them). */
async function resumeRunner(
  db: Kysely<Database>,
  input: Omit<RunnerPauseInput, "reason">,
): Promise<PauseState> {
  return db.transaction().execute(async (tx) => {
    const workspaceId = await registeredWorkspace(tx, input);
    const row = await tx
      .updateTable("runners")
      .set({ paused_at: null, paused_by: null })
      .where("workspace_id", "=", workspaceId)
      .where("runner_id", "=", input.runnerId)
      .where("paused_at", "is not", null)
      .returning("runner_id")
      .executeTakeFirst();
    if (row)
      await resumed(tx, {
        type: "runner.resumed",
        workspaceId,
        runnerId: input.runnerId,
        data: { by: input.by },
      });
    return { workspaceId, runnerId: input.runnerId, paused: false, changed: row !== undefined };
  });
}

async function resumed(
  tx: Transaction<Database>,
  event: Parameters<typeof recordEvent>[1] & { workspaceId: string },
): Promise<void> {
  await recordEvent(tx, event);
  await sql`select pg_notify(${resumeChannel}, ${event.workspaceId})`.execute(tx);
}

/**
 * The workspace of the registered runner `input` names: 404 when none, 400 when the id is in
 * several and none was given.
 */
export async function registeredWorkspace(
  tx: Transaction<Database>,
  input: { readonly workspaceId: string; readonly runnerId: string },
): Promise<string> {
  checkSegmentId("runnerId", input.runnerId);
  if (input.workspaceId) checkSegmentId("workspaceId", input.workspaceId);
  let query = tx
    .selectFrom("runners")
    .select("workspace_id")
    .where("runner_id", "=", input.runnerId)
    .orderBy("workspace_id");
  if (input.workspaceId) query = query.where("workspace_id", "=", input.workspaceId);
  const rows = await query.execute();
  const where = input.workspaceId ? ` in workspace "${input.workspaceId}"` : "";
  if (rows.length === 0)
    throw new ConnectError(
      `runner "${input.runnerId}" is not registered${where}; check the id with GET /v1/admin/runners`,
      Code.NotFound,
    );
  if (rows.length > 1)
    throw new ConnectError(
      `runner id "${input.runnerId}" is registered in workspaces ` +
        `${rows.map((r) => `"${r.workspace_id}"`).join(", ")}; give workspaceId ` +
        `to say which one`,
      Code.InvalidArgument,
    );
  return rows[0]!.workspace_id;
}

/** Pause and resume, bound to the database: what the fleet service calls. */
export interface Pauses {
  pauseWorkspace(input: PauseInput): Promise<PauseState>;
  resumeWorkspace(input: Omit<PauseInput, "reason">): Promise<PauseState>;
  pauseRunner(input: RunnerPauseInput): Promise<PauseState>;
  resumeRunner(input: Omit<RunnerPauseInput, "reason">): Promise<PauseState>;
}

/** Pause and resume on `db`. */
export function createPauses(db: Kysely<Database>): Pauses {
  return {
    pauseWorkspace: (input) => pauseWorkspace(db, input),
    resumeWorkspace: (input) => resumeWorkspace(db, input),
    pauseRunner: (input) => pauseRunner(db, input),
    resumeRunner: (input) => resumeRunner(db, input),
  };
}
