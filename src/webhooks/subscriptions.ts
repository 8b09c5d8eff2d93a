import { randomUUID } from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import type { Kysely, Selectable } from "kysely";
import { checkRowId } from "../broker/ids.js";
import { webhookSecretBinding } from "../secrets/bindings.js";
import type { SecretBox } from "../secrets/box.js";
import type { Database, WebhookSubscriptionsTable } from "../store/schema.js";
import type { CheckedSubscription } from "./rules.js";

/** A subscription as every view shows it: never its secret. */
export interface Subscription {
  readonly id: string;
  readonly workspaceId: string | null;
  readonly url: string;
  readonly events: readonly string[];
  readonly enabled: boolean;
  readonly disabledReason: string | null;
  readonly failedInARow: number;
  readonly createdAt: Date;
  readonly createdBy: string;
}

type Row = Selectable<WebhookSubscriptionsTable>;

/** The view of a row; the sealed secret stays behind. */
function subscriptionView(r: Omit<Row, "secret_sealed">): Subscription {
  return {
    id: r.id,
    workspaceId: r.workspace_id,
    url: r.url,
    events: r.events,
    enabled: r.enabled,
    disabledReason: r.disabled_reason,
    failedInARow: r.failed_in_a_row,
    createdAt: r.created_at,
    createdBy: r.created_by,
  };
}

const viewColumns = [
  "id",
  "workspace_id",
  "url",
  "events",
  "enabled",
  "disabled_reason",
  "failed_in_a_row",
  "created_at",
  "created_by",
] as const;

/** Throws not_found naming the id. */
export function noSubscription(id: string): never {
  throw new ConnectError(`no webhook subscription ${id}`, Code.NotFound);
}

/** Subscriptions: stored with the secret sealed to the row. */
export function createSubscriptions(db: Kysely<Database>, box: SecretBox) {
  const get = async (id: string): Promise<Subscription> => {
    const sid = checkRowId("id", "webhook subscription", id);
    const row = await db
      .selectFrom("webhook_subscriptions")
      .select(viewColumns)
      .where("id", "=", sid)
      .executeTakeFirst();
    return row ? subscriptionView(row) : noSubscription(sid);
  };
  return {
    get,
    async create(s: CheckedSubscription, createdBy: string): Promise<Subscription> {
      const id = randomUUID();
      const row = await db
        .insertInto("webhook_subscriptions")
        .values({
          id,
          workspace_id: s.workspaceId,
          url: s.url,
          events: s.events,
          secret_sealed: box.seal(s.secret, webhookSecretBinding(id)),
          created_by: createdBy,
          disabled_reason: null,
        })
        .returning(viewColumns)
        .executeTakeFirstOrThrow();
      return subscriptionView(row);
    },
    async list(workspaceId: string): Promise<Subscription[]> {
      let q = db.selectFrom("webhook_subscriptions").select(viewColumns).orderBy("created_at");
      if (workspaceId) q = q.where("workspace_id", "=", workspaceId);
      return (await q.execute()).map(subscriptionView);
    },
    async remove(id: string): Promise<Subscription> {
      const sid = checkRowId("id", "webhook subscription", id);
      const row = await db
        .deleteFrom("webhook_subscriptions")
        .where("id", "=", sid)
        .returning(viewColumns)
        .executeTakeFirst();
      return row ? subscriptionView(row) : noSubscription(sid);
    },
    /** Enables (counting failures afresh) or disables by hand. */
    async setEnabled(id: string, enabled: boolean): Promise<Subscription> {
      const sid = checkRowId("id", "webhook subscription", id);
      const row = await db
        .updateTable("webhook_subscriptions")
        .set(
          enabled
            ? { enabled, disabled_reason: null, failed_in_a_row: 0 }
            : { enabled, disabled_reason: "disabled by an administrator" },
        )
        .where("id", "=", sid)
        .returning(viewColumns)
        .executeTakeFirst();
      return row ? subscriptionView(row) : noSubscription(sid);
    },
  };
}
