import { Code, ConnectError } from "@connectrpc/connect";
import { sql, type Transaction } from "kysely";
import { releaseRunnerLeases } from "../broker/leases/release.js";
import { recordEvent } from "../events/record.js";
import type { Store } from "../store/database.js";
import { logUnlessUnreachable } from "../store/unreachable.js";
import type { Database } from "../store/schema.js";
import { checkSegmentId } from "./segment-id.js";

/** The NOTIFY channel that tells every replica "this runner was retired". */
const retirementsChannel = "forelead_retirements";

/** What a retirement did. */
interface RetireResult {
  readonly workspaceId: string;
  readonly runnerId: string;
  readonly retiredAt: Date;
  readonly releasedJobIds: readonly string[];
  /** False when it was already retired. */
  readonly newlyRetired: boolean;
}

/** A retirement request. */
interface RetireInput {
  readonly runnerId: string;
  /** Empty: the one workspace the runner id is known in (registered or issued a certificate). */
  readonly workspaceId: string;
  /** The SPIFFE ID of the administrator. */
  readonly by: string;
  readonly reason: string;
}

/**
 * Retired runner identities, known to every control-plane process in memory
 * so the per-request check is a set lookup. Retirement is permanent, so the
 * set only grows: it is loaded at start, kept current across replicas by
 * LISTEN/NOTIFY, reloaded when the LISTEN connection is back after being down
 * (notifications sent meanwhile are lost) and now and then anyway, and
 * updated locally before a retire replies, so the runner's very next request
 * to this replica is refused.
 */
export interface Retirements {
  /** Why the runner is refused, or undefined. Synchronous and cheap: it runs on every request. */
  refusal(runner: { workspaceId: string; runnerId: string }): string | undefined;
  retire(input: RetireInput): Promise<RetireResult>;
  close(): Promise<void>;
}

/** Loads the retired runners of `store` and follows new retirements. */
export async function createRetirements(
  store: Store,
  options: { refreshIntervalMs?: number } = {},
): Promise<Retirements> {
  const retired = new Map<string, Date>();
  const key = (workspaceId: string, runnerId: string) => `${workspaceId}/${runnerId}`;
  const note = (workspaceId: string, runnerId: string, at: Date) => {
    if (!retired.has(key(workspaceId, runnerId))) retired.set(key(workspaceId, runnerId), at);
  };
  const load = async () => {
    const rows = await store.db
      .selectFrom("runner_retirements")
      .select(["workspace_id", "runner_id", "retired_at"])
      .execute();
    for (const r of rows) note(r.workspace_id, r.runner_id, r.retired_at);
  };
  const reload = () =>
    void load().catch((err) =>
      logUnlessUnreachable("identity: could not reload retired runners", err),
    );
  // Subscribe before loading: a retirement between the two is then never missed.
  const unlisten = await store.listen(
    retirementsChannel,
    (payload) => {
      try {
        const { w, r, at } = JSON.parse(payload) as { w: string; r: string; at: string };
        note(w, r, new Date(at));
      } catch {
        reload();
      }
    },
    reload,
  );
  await load();
  const timer = setInterval(reload, options.refreshIntervalMs ?? 30_000);
  timer.unref();

  return {
    refusal(runner) {
      const at = retired.get(key(runner.workspaceId, runner.runnerId));
      if (!at) return undefined;
      return (
        `runner "${runner.runnerId}" in workspace "${runner.workspaceId}" was ` +
        `retired at ${at.toISOString()}; its certificates are refused from then ` +
        `on; enroll a new runner identity`
      );
    },

    async retire(input) {
      checkSegmentId("runnerId", input.runnerId);
      if (input.workspaceId) checkSegmentId("workspaceId", input.workspaceId);
      if (input.reason.length > 1000)
        throw new ConnectError("reason is longer than 1000 characters", Code.InvalidArgument);
      const result = await store.db.transaction().execute(async (tx) => {
        const workspaceId = input.workspaceId || (await onlyWorkspaceOf(tx, input.runnerId));
        const inserted = await tx
          .insertInto("runner_retirements")
          .values({
            workspace_id: workspaceId,
            runner_id: input.runnerId,
            retired_by: input.by,
            reason: input.reason,
          })
          .onConflict((oc) => oc.columns(["workspace_id", "runner_id"]).doNothing())
          .returning("retired_at")
          .executeTakeFirst();
        const row =
          inserted ??
          (await tx
            .selectFrom("runner_retirements")
            .select("retired_at")
            .where("workspace_id", "=", workspaceId)
            .where("runner_id", "=", input.runnerId)
            .executeTakeFirstOrThrow());
        // The registration stays, marked retired: operators still see the runner in the list.
        await tx
          .updateTable("runners")
          .set({ retired_at: row.retired_at })
          .where("workspace_id", "=", workspaceId)
          .where("runner_id", "=", input.runnerId)
          .where("retired_at", "is", null)
          .execute();
        const releasedJobIds = await releaseRunnerLeases(tx, {
          workspaceId,
          runnerId: input.runnerId,
        });
        if (inserted)
          await recordEvent(tx, {
            type: "runner.retired",
            workspaceId,
            runnerId: input.runnerId,
            data: { by: input.by, reason: input.reason },
          });
        const payload = JSON.stringify({
          w: workspaceId,
          r: input.runnerId,
          at: row.retired_at.toISOString(),
        });
        await sql`select pg_notify(${retirementsChannel}, ${payload})`.execute(tx);
        return {
          workspaceId,
          runnerId: input.runnerId,
          retiredAt: row.retired_at,
          releasedJobIds,
          newlyRetired: inserted !== undefined,
        };
      });
      note(result.workspaceId, result.runnerId, result.retiredAt);
      return result;
    },

    async close() {
      clearInterval(timer);
      await unlisten();
    },
  };
}

/** The one workspace `runnerId` is known in; refuses when none or several. */
async function onlyWorkspaceOf(tx: Transaction<Database>, runnerId: string): Promise<string> {
  const { rows } = await sql<{ workspace_id: string }>`
    select workspace_id from runners where runner_id = ${runnerId}
    union select workspace_id from issued_certificates where runner_id = ${runnerId}
    order by workspace_id`.execute(tx);
  if (rows.length === 1) return rows[0]!.workspace_id;
  if (rows.length === 0) {
    throw new ConnectError(
      `runner "${runnerId}" has neither registered nor been issued a ` +
        `certificate here; give workspaceId to retire it anyway`,
      Code.NotFound,
    );
  }
  throw new ConnectError(
    `runner id "${runnerId}" is known in workspaces ` +
      `${rows.map((r) => `"${r.workspace_id}"`).join(", ")}; give workspaceId ` +
      `to say which one to retire`,
    Code.InvalidArgument,
  );
}
