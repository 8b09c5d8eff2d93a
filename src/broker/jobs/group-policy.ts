// Concurrency-group policies: what an enqueue into a concurrency group does to the jobs of its key
// already there (issue 49). Applied in the enqueue's transaction under the group's advisory lock,
// the lock forelead_claim takes for the group, so enqueues of one key, on any replica, apply their
// policies one after another, each seeing the last one's commit.
import { Code, ConnectError } from "@connectrpc/connect";
import { sql, type Transaction } from "kysely";
import type { Database } from "../../store/schema.js";
import { throttledError } from "../../protocol/throttled.js";
import type { SettleHook } from "../pipelines/settle-hook.js";
import { cancelJob } from "./cancel.js";
import type { EnqueueInput } from "./rules.js";

/** Whether an enqueue asks for more than today's queueing of its group. */
export function hasGroupPolicy(input: EnqueueInput): boolean {
  return (input.concurrencyPolicy || "queue") !== "queue" || (input.maxPending ?? 0) > 0;
}

/**
 * Applies the enqueue's policy to the other jobs of its key before the new job `jobId` is stored,
 * in `tx`: each cancellation is a cancel (cancelJob) by `job <jobId> (<policy>)`, so it names the
 * job that caused it; a running job learns it on its next renew. A job that settled meanwhile is
 * left as it settled. An enqueue repeating an idempotency key applies nothing (its job is stored
 * already). Throws throttled (429) naming the key when maxPending is reached with onFull reject.
 */
export async function applyGroupPolicy(
  tx: Transaction<Database>,
  input: EnqueueInput,
  jobId: string,
  hook?: SettleHook,
): Promise<void> {
  const ws = input.workspaceId;
  const key = input.concurrencyKey!;
  // forelead_claim's lock of the group (workspace, key).
  await sql`select pg_advisory_xact_lock(hashtextextended(${ws} || chr(31) || ${key}, 0))`.execute(
    tx,
  );
  if (input.idempotencyKey) {
    const stored = await tx
      .selectFrom("jobs")
      .select("id")
      .where("workspace_id", "=", ws)
      .where("idempotency_key", "=", input.idempotencyKey)
      .executeTakeFirst();
    if (stored) return;
  }
  const policy = input.concurrencyPolicy || "queue";
  const cancel = async (ids: readonly string[], why: string) => {
    for (const id of ids)
      await cancelJob(tx, id, `job ${jobId} (${why})`, hook).catch((err: unknown) => {
        // Settled meanwhile (a completion won): it stays as it settled.
        if (!(err instanceof ConnectError && err.code === Code.Aborted)) throw err;
      });
  };
  const jobsOfKey = (state: "queued" | "running") =>
    tx
      .selectFrom("jobs")
      .select("id")
      .where("workspace_id", "=", ws)
      .where("concurrency_key", "=", key)
      .where("state", "=", state)
      .orderBy("created_at")
      .orderBy("id")
      .execute()
      .then((rows) => rows.map((r) => r.id));
  if (policy === "cancel_in_progress") await cancel(await jobsOfKey("running"), policy);
  if (policy === "keep_newest") await cancel(await jobsOfKey("queued"), policy);
  const max = input.maxPending ?? 0;
  if (max === 0) return;
  const pending = await jobsOfKey("queued");
  if (pending.length < max) return;
  if ((input.onFull || "reject") === "reject")
    throw throttledError(
      `concurrency group "${key}" of workspace "${ws}" has ${pending.length} jobs pending, ` +
        `its maxPending of ${max}; enqueue again when one has started, or use onFull replace_oldest`,
    );
  await cancel(pending.slice(0, pending.length - max + 1), "replace_oldest");
}
