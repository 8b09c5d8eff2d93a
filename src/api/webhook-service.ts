import type { ServiceImpl } from "@connectrpc/connect";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { WebhookService } from "../../gen/forelead/admin/v1/webhooks_pb.js";
import type { Delivery } from "../webhooks/deliveries.js";
import type { Subscription } from "../webhooks/subscriptions.js";
import type { Webhooks } from "../webhooks/webhooks.js";
import { audited } from "./audit-actions.js";
import { principalOf } from "./context.js";
import { apiVersion } from "./request-rules.js";

/** WebhookService: decode, call the webhooks facade, encode; changes are audited. */
export function createWebhookService(webhooks: Webhooks): ServiceImpl<typeof WebhookService> {
  const { subscriptions, deliveries } = webhooks;
  const changed =
    (action: string, verb: string) => (id: string, ctx: Parameters<typeof audited>[0]) =>
      audited(
        ctx,
        action,
        `webhook ${id.slice(0, 80)}`,
        () =>
          verb === "delete"
            ? subscriptions.remove(id)
            : subscriptions.setEnabled(id, verb === "enable"),
        (w) => ({ reason: `webhook ${w.id} to ${w.url}: ${verb}d` }),
      ).then((w) => ({ apiVersion, webhook: webhookMessage(w) }));
  return {
    async createWebhook(req, ctx) {
      const target = `webhook to ${hostOf(req.url)}`;
      const w = await audited(
        ctx,
        "webhook.create",
        target,
        () =>
          webhooks.create(
            {
              workspaceId: req.workspaceId,
              url: req.url,
              events: req.events,
              secret: req.secret,
            },
            principalOf(ctx).spiffeId.text,
          ),
        (w) => ({
          target: `webhook ${w.id} to ${w.url}`,
          reason: `created for ${w.events.join(", ")}`,
        }),
      );
      return { apiVersion, webhook: webhookMessage(w) };
    },
    async listWebhooks(req) {
      const list = await subscriptions.list(req.workspaceId);
      return { apiVersion, webhooks: list.map(webhookMessage) };
    },
    async getWebhook(req) {
      return { apiVersion, webhook: webhookMessage(await subscriptions.get(req.id)) };
    },
    deleteWebhook: (req, ctx) => changed("webhook.delete", "delete")(req.id, ctx),
    enableWebhook: (req, ctx) => changed("webhook.enable", "enable")(req.id, ctx),
    disableWebhook: (req, ctx) => changed("webhook.disable", "disable")(req.id, ctx),
    async listWebhookDeliveries(req) {
      const log = await deliveries.log(req.id, req.pageSize);
      return { apiVersion, deliveries: log.map(deliveryMessage) };
    },
    async redeliverWebhook(req, ctx) {
      const d = await audited(
        ctx,
        "webhook.redeliver",
        `webhook delivery ${req.deliveryId.slice(0, 80)}`,
        () => deliveries.redeliver(req.deliveryId),
        (d) => ({ reason: `delivery ${d.id} of event ${d.eventId} is pending again` }),
      );
      return { apiVersion, delivery: deliveryMessage(d) };
    },
  };
}

function webhookMessage(w: Subscription) {
  return {
    id: w.id,
    workspaceId: w.workspaceId ?? "",
    url: w.url,
    events: [...w.events],
    enabled: w.enabled,
    disabledReason: w.disabledReason ?? "",
    failedInARow: w.failedInARow,
    createdAt: timestampFromDate(w.createdAt),
    createdBy: w.createdBy,
  };
}

function deliveryMessage(d: Delivery) {
  return {
    id: d.id,
    subscriptionId: d.subscriptionId,
    eventId: BigInt(d.eventId),
    eventType: d.eventType,
    status: d.status,
    attempts: d.attempts,
    responseCode: d.responseCode ?? 0,
    lastError: d.lastError ?? "",
    createdAt: timestampFromDate(d.createdAt),
    nextAttemptAt: d.nextAttemptAt ? timestampFromDate(d.nextAttemptAt) : undefined,
    finishedAt: d.finishedAt ? timestampFromDate(d.finishedAt) : undefined,
    tries: d.tries.map((t) => ({
      at: timestampFromDate(new Date(t.at)),
      responseCode: t.responseCode ?? 0,
      error: t.error ?? "",
    })),
  };
}

/** The URL's host, for the audit trail: a refused URL may carry a password in its user part. */
function hostOf(url: string): string {
  try {
    return new URL(url).host.slice(0, 200) || "a URL without a host";
  } catch {
    return "a URL that does not parse";
  }
}
