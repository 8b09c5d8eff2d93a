import { readFile } from "node:fs/promises";
import { Command, InvalidArgumentError } from "commander";
import { toJsonString, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import {
  CreateWebhookResponseSchema,
  DeleteWebhookResponseSchema,
  DisableWebhookResponseSchema,
  EnableWebhookResponseSchema,
  GetWebhookResponseSchema,
  ListWebhookDeliveriesResponseSchema,
  ListWebhooksResponseSchema,
  RedeliverWebhookResponseSchema,
  WebhookService,
  type Webhook,
  type WebhookDelivery,
} from "../../gen/forelead/admin/v1/webhooks_pb.js";
import {
  serviceClientFromFlags,
  withAdminClientOptions,
  type AdminClientFlags,
} from "./connection.js";
import { collect } from "./options.js";

interface WebhookFlags extends AdminClientFlags {
  json?: boolean;
}

interface CreateFlags extends WebhookFlags {
  workspace?: string;
  event: string[];
  secretFile?: string;
}

/**
 * `forelead webhooks create|list|get|enable|disable|delete|deliveries|redeliver`: signed POSTs of
 * the event stream's events (docs/webhooks.md; admin role). The secret is read from a file or
 * FORELEAD_WEBHOOK_SECRET, never from the command line.
 */
export function webhooksCommand(
  write: (text: string) => void = (t) => process.stdout.write(t),
): Command {
  const webhooks = new Command("webhooks");
  const print = <S extends DescMessage>(
    flags: WebhookFlags,
    schema: S,
    reply: MessageShape<S>,
    text: string,
  ) => write(flags.json ? `${toJsonString(schema, reply)}\n` : text);
  const sub = (name: string, description: string) =>
    withAdminClientOptions(
      webhooks.command(name).description(description).option("--json", "print the reply as JSON"),
    );

  sub("create", "subscribe an https URL to event types (audited)")
    .argument("<url>", "https://host/path")
    .option("--workspace <id>", "only this workspace's events (default: every workspace)")
    .option(
      "--event <type>",
      "an event type (job.settled), a family (job.*) or *; repeat for more",
      collect,
      [],
    )
    .option(
      "--secret-file <file>",
      "the signing secret, 16 bytes or more (default: FORELEAD_WEBHOOK_SECRET)",
    )
    .action(async (url: string, flags: CreateFlags) => {
      const secret = flags.secretFile
        ? (await readFile(flags.secretFile, "utf8")).trim()
        : (process.env["FORELEAD_WEBHOOK_SECRET"] ?? "");
      if (!secret)
        throw new InvalidArgumentError(
          "give the secret with --secret-file FILE or FORELEAD_WEBHOOK_SECRET",
        );
      const client = await serviceClientFromFlags(flags, WebhookService);
      const reply = await client.createWebhook({
        apiVersion: "v1",
        workspaceId: flags.workspace ?? "",
        url,
        events: flags.event,
        secret,
      });
      print(flags, CreateWebhookResponseSchema, reply, `${webhookLine(reply.webhook!)}\n`);
    });

  sub("list", "the subscriptions")
    .option("--workspace <id>", "only this workspace's")
    .action(async (flags: WebhookFlags & { workspace?: string }) => {
      const client = await serviceClientFromFlags(flags, WebhookService);
      const reply = await client.listWebhooks({
        apiVersion: "v1",
        workspaceId: flags.workspace ?? "",
      });
      print(
        flags,
        ListWebhooksResponseSchema,
        reply,
        reply.webhooks.map((w) => `${webhookLine(w)}\n`).join("") || "no webhooks\n",
      );
    });

  sub("get", "one subscription")
    .argument("<id>", "the subscription id")
    .action(async (id: string, flags: WebhookFlags) => {
      const client = await serviceClientFromFlags(flags, WebhookService);
      const reply = await client.getWebhook({ apiVersion: "v1", id });
      print(flags, GetWebhookResponseSchema, reply, `${webhookLine(reply.webhook!)}\n`);
    });

  for (const [name, description] of [
    ["enable", "enable a subscription; its pending deliveries go out (audited)"],
    ["disable", "disable a subscription; nothing is delivered until enabled (audited)"],
    ["delete", "delete a subscription and its delivery log (audited)"],
  ] as const) {
    sub(name, description)
      .argument("<id>", "the subscription id")
      .action(async (id: string, flags: WebhookFlags) => {
        const client = await serviceClientFromFlags(flags, WebhookService);
        const req = { apiVersion: "v1", id };
        const line = (w: Webhook | undefined) => `${webhookLine(w!)} (${name}d)\n`;
        if (name === "enable") {
          const reply = await client.enableWebhook(req);
          print(flags, EnableWebhookResponseSchema, reply, line(reply.webhook));
        } else if (name === "disable") {
          const reply = await client.disableWebhook(req);
          print(flags, DisableWebhookResponseSchema, reply, line(reply.webhook));
        } else {
          const reply = await client.deleteWebhook(req);
          print(flags, DeleteWebhookResponseSchema, reply, line(reply.webhook));
        }
      });
  }

  sub("deliveries", "a subscription's delivery log, newest event first")
    .argument("<id>", "the subscription id")
    .action(async (id: string, flags: WebhookFlags) => {
      const client = await serviceClientFromFlags(flags, WebhookService);
      const reply = await client.listWebhookDeliveries({ apiVersion: "v1", id, pageSize: 0 });
      print(
        flags,
        ListWebhookDeliveriesResponseSchema,
        reply,
        reply.deliveries.map((d) => `${deliveryLine(d)}\n`).join("") || "no deliveries\n",
      );
    });

  sub("redeliver", "send a failed (or delivered) delivery again, with its id (audited)")
    .argument("<delivery-id>", "the delivery id (forelead-delivery)")
    .action(async (deliveryId: string, flags: WebhookFlags) => {
      const client = await serviceClientFromFlags(flags, WebhookService);
      const reply = await client.redeliverWebhook({ apiVersion: "v1", deliveryId });
      print(flags, RedeliverWebhookResponseSchema, reply, `${deliveryLine(reply.delivery!)}\n`);
    });
  return webhooks;
}

function webhookLine(w: Webhook): string {
  const state = w.enabled ? "enabled" : `disabled (${w.disabledReason})`;
  return `${w.id} ${w.url} ${w.workspaceId || "*"} ${w.events.join(",")} ${state}`;
}

function deliveryLine(d: WebhookDelivery): string {
  const at = d.finishedAt ?? d.nextAttemptAt ?? d.createdAt;
  const code = d.responseCode ? ` ${d.responseCode}` : "";
  const error = d.lastError ? ` ${d.lastError}` : "";
  return (
    `${d.id} event ${d.eventId} ${d.eventType} ${d.status} attempts ${d.attempts}${code} ` +
    `${at ? timestampDate(at).toISOString() : ""}${error}`
  );
}
