import { Code, ConnectError } from "@connectrpc/connect";
import { sql, type Kysely } from "kysely";
import type { Database } from "../../store/schema.js";
import { recordEvent } from "../../events/record.js";
import { registeredWorkspace } from "./pauses.js";
import { liveLeaseCount, runnerState, type RunnerState } from "./state.js";

/** Which runner to forget: the workspace may be left empty when the id is registered in one only. */
export interface ForgetInput {
  readonly runnerId: string;
  readonly workspaceId: string;
  /** Who asks, for the event. */
  readonly by: string;
}

/**
 * Deletes an offline runner's registration and its inventory, so lists and counts stop showing a
 * runner that is gone; its identity is not retired, and a runner with it may register again. A
 * runner in any other state is refused (failed_precondition) with its state: the check and the
 * delete are one statement, so a runner heard from meanwhile is never forgotten.
 */
export async function forgetRunner(
  db: Kysely<Database>,
  input: ForgetInput,
  offlineSeconds: number,
): Promise<{ workspaceId: string }> {
  return db.transaction().execute(async (tx) => {
    const workspaceId = await registeredWorkspace(tx, input);
    const { rows } = await sql<{ state: RunnerState; forgotten: boolean }>`
      with r as (
        select r.workspace_id, r.runner_id, ${runnerState("r", liveLeaseCount("r"), offlineSeconds)} as state
        from runners r where r.workspace_id = ${workspaceId} and r.runner_id = ${input.runnerId}
        for update
      ), gone as (
        delete from runners using r where r.state = 'offline'
          and runners.workspace_id = r.workspace_id and runners.runner_id = r.runner_id
        returning runners.runner_id
      )
      select r.state, exists (select 1 from gone) as forgotten from r`.execute(tx);
    const row = rows[0];
    if (!row?.forgotten)
      throw new ConnectError(
        `runner "${input.runnerId}" in workspace "${workspaceId}" is ${row?.state ?? "gone"}, ` +
          `not offline; only an offline runner's registration can be forgotten (stop the runner ` +
          `first, or retire its identity with \`forelead runners retire\`)`,
        Code.FailedPrecondition,
      );
    for (const table of ["inventory_items", "inventory_flags", "inventory_reports"] as const)
      await tx
        .deleteFrom(table)
        .where("workspace_id", "=", workspaceId)
        .where("runner_id", "=", input.runnerId)
        .execute();
    await recordEvent(tx, {
      type: "runner.forgotten",
      workspaceId,
      runnerId: input.runnerId,
      data: { by: input.by },
    });
    return { workspaceId };
  });
}
