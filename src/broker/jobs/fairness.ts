// Fair shares: the weights of a workspace's fairness keys (fairness_keys). The claim's order
// (forelead_claim, forelead_fair_tag) is the one home of the rule; this sets and reads the weights.
import { sql, type Kysely } from "kysely";
import type { Database } from "../../store/schema.js";
import { checkSegmentId } from "../../identity/segment-id.js";
import { bad } from "./rules.js";

/** The bounds of a weight: served up to 1000 times as often as a key of weight 1. */
const fairnessLimits = { minWeight: 1, maxWeight: 1000 } as const;

/** A fairness key as the admin views show it. */
export interface FairnessKeyView {
  readonly workspaceId: string;
  readonly key: string;
  readonly weight: number;
  /** Its jobs queued now. */
  readonly queued: number;
  readonly updatedAt: Date;
}

/** A weight to set: the key (an id) in its workspace. */
export interface FairnessKeyInput {
  readonly workspaceId: string;
  readonly key: string;
  readonly weight: number;
}

/**
 * Sets a key's weight, creating the key: its jobs enqueued from now on take their share tags
 * with it (forelead_fair_tag). Refuses a key or workspace that is not an id and a weight outside
 * fairnessLimits, storing nothing.
 */
export async function setFairnessKey(
  db: Kysely<Database>,
  input: FairnessKeyInput,
): Promise<FairnessKeyView> {
  checkSegmentId("workspaceId", input.workspaceId);
  checkSegmentId("key", input.key);
  const { minWeight, maxWeight } = fairnessLimits;
  if (!(Number.isInteger(input.weight) && input.weight >= minWeight && input.weight <= maxWeight))
    bad(
      `weight must be a whole number from ${minWeight} to ${maxWeight} (how many times as often ` +
        `as a key of weight 1 the key is served); got ${input.weight}`,
    );
  await db
    .insertInto("fairness_keys")
    .values({ workspace_id: input.workspaceId, fairness_key: input.key, weight: input.weight })
    .onConflict((oc) =>
      oc
        .columns(["workspace_id", "fairness_key"])
        .doUpdateSet({ weight: input.weight, updated_at: sql<Date>`now()` }),
    )
    .execute();
  const [view] = await listFairnessKeys(db, input.workspaceId, input.key);
  return view!;
}

/** The workspace's fairness keys (one when `key` is given), by key, with their queued jobs. */
export async function listFairnessKeys(
  db: Kysely<Database>,
  workspaceId: string,
  key?: string,
): Promise<FairnessKeyView[]> {
  checkSegmentId("workspaceId", workspaceId);
  const rows = await db
    .selectFrom("fairness_keys as f")
    .select(["f.workspace_id", "f.fairness_key", "f.weight", "f.updated_at"])
    .select((eb) =>
      eb
        .selectFrom("jobs as j")
        .select(sql<number>`count(*)::int`.as("n"))
        .whereRef("j.workspace_id", "=", "f.workspace_id")
        .where("j.state", "=", "queued")
        .where("j.fair_tag", "is not", null)
        .whereRef("j.fairness_key", "=", "f.fairness_key")
        .as("queued"),
    )
    .where("f.workspace_id", "=", workspaceId)
    .$if(key !== undefined, (qb) => qb.where("f.fairness_key", "=", key!))
    .orderBy("f.fairness_key")
    .execute();
  return rows.map((r) => ({
    workspaceId: r.workspace_id,
    key: r.fairness_key,
    weight: r.weight,
    queued: r.queued ?? 0,
    updatedAt: new Date(r.updated_at),
  }));
}
