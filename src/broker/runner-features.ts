import type { Kysely } from "kysely";
import type { Database } from "../store/schema.js";
import type { LeaseHolder } from "./lease-check.js";
import { featureLabel } from "../protocol/input-request.js";

const featureLabelPrefix = featureLabel("");

/**
 * The protocol features a runner declared when it registered. The one place
 * the suspend rules read them from: until the registration's own `features`
 * field is stored (runner capabilities, issue 21 item 3), a runner declares
 * a feature with the label `feature:<name>` (e.g. `feature:checkpoint-v1`);
 * switching to the stored list changes this function only.
 */
export async function declaredFeatures(db: Kysely<Database>, holder: LeaseHolder): Promise<string[]> {
  const row = await db.selectFrom("runners").select("labels").where("workspace_id", "=", holder.workspaceId).where("runner_id", "=", holder.runnerId).executeTakeFirst();
  return (row?.labels ?? []).filter((l) => l.startsWith(featureLabelPrefix)).map((l) => l.slice(featureLabelPrefix.length));
}
