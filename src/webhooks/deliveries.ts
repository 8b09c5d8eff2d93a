import { Code, ConnectError } from "@connectrpc/connect";
import { sql, type Kysely, type Selectable } from "kysely";
import { checkRowId } from "../broker/ids.js";
import { recordEvent } from "../events/record.js";
import type { Database, WebhookDeliveriesTable, WebhookTry } from "../store/schema.js";
import { noSubscription } from "./subscriptions.js";

/** A delivery as its log shows it. */
export interface Delivery {
  readonly id: string;
  readonly subscriptionId: string;
  readonly eventId: number;
  readonly eventType: string;
  readonly status: "pending" | "delivered" | "failed";
  readonly attempts: number;
  readonly responseCode: number | null;
  readonly lastError: string | null;
  readonly createdAt: Date;
  readonly nextAttemptAt: Date | null;
  readonly finishedAt: Date | null;
  readonly tries: readonly WebhookTry[];
}

type Row = Selectable<WebhookDeliveriesTable>;

function deliveryView(r: Row): Delivery {
  return {
    id: r.id,
    subscriptionId: r.subscription_id,
    eventId: Number(r.event_id),
    eventType: r.event_type,
    status: r.status,
    attempts: r.attempts,
    responseCode: r.response_code,
    lastError: r.last_error,
    createdAt: r.created_at,
    nextAttemptAt: r.status === "pending" ? r.next_attempt_at : null,
    finishedAt: r.finished_at,
    tries: r.tries,
  };
}

/**
 * The body of a delivery: the event as the global event stream's JSON shows it
 * (GET /v1/admin/events): id as a string, empty names left out.
 */
export function deliveryBody(r: Row): string {
  const ms = r.event_at.getTime();
  return JSON.stringify({
    id: String(r.event_id),
    at: ms % 1000 ? r.event_at.toISOString() : r.event_at.toISOString().replace(".000Z", "Z"),
    type: r.event_type,
    workspaceId: r.workspace_id || undefined,
    runnerId: r.runner_id || undefined,
    jobId: r.job_id || undefined,
    data: r.data,
  });
}

/** A claimed delivery with the sealed secret and URL of its subscription. */
export interface ClaimedDelivery {
  readonly row: Row;
  readonly url: string;
  readonly secretSealed: Buffer;
}

/** How a finished attempt is recorded. */
export type AttemptOutcome =
  | { readonly kind: "delivered"; readonly responseCode: number }
  | { readonly kind: "retry"; readonly delayMs: number; readonly responseCode?: number }
  | { readonly kind: "failed"; readonly responseCode?: number };

/** Tries kept in a delivery's log (the newest). */
const maxTries = 50;

/** Delivery rows: claim, record, log, redeliver. */
export function createDeliveries(db: Kysely<Database>, disableAfter: number) {
  return {
    /**
     * Claims up to `limit` due deliveries, each the oldest pending one of an
     * enabled subscription whose event's concurrent writers have all ended (an
     * event id taken earlier may commit later: the event stream's gap rule,
     * src/events/read.ts), so a subscription's deliveries go out one at a time
     * in event id order. A claimed row is held until `locked_until` (skipped by
     * other replicas meanwhile); a replica that dies holding it lets it go to
     * another once that passes, which sends it again (at least once).
     */
    async claim(limit: number, leaseMs: number): Promise<ClaimedDelivery[]> {
      // heads: each enabled subscription's oldest pending delivery, one probe of the pending index
      // each, so a claim costs the subscriptions, not the backlog (the anti-join alone compared
      // every pending row with every other of its subscription: docs/performance.md, section 9).
      const { rows } = await sql<Row & { url: string; secret_sealed: Buffer }>`
        with heads as (
          select h.id from webhook_subscriptions s
          cross join lateral (select h.id from webhook_deliveries h
            where h.subscription_id = s.id and h.status = 'pending'
            order by h.event_id limit 1) h
          where s.enabled
        ), due as (
          select d.id from webhook_deliveries d
          join heads on heads.id = d.id
          where d.status = 'pending' and d.next_attempt_at <= now()
            and (d.locked_until is null or d.locked_until <= now())
            and not exists (select 1 from webhook_deliveries p where p.subscription_id =
              d.subscription_id and p.status = 'pending' and p.event_id < d.event_id)
            and not exists (select 1 from pg_snapshot_xip(d.event_snapshot) x
              where not pg_visible_in_snapshot(x, pg_current_snapshot()))
          order by d.event_id limit ${limit}
          for update of d skip locked
        )
        update webhook_deliveries d
        set locked_until = now() + make_interval(secs => ${leaseMs / 1000}),
          attempts = d.attempts + 1, first_attempt_at = coalesce(d.first_attempt_at, now())
        from due, webhook_subscriptions s
        where d.id = due.id and s.id = d.subscription_id
        returning d.*, s.url, s.secret_sealed`.execute(db);
      return rows.map(({ url, secret_sealed, ...row }) => ({
        row: { ...row, event_id: Number(row.event_id) },
        url,
        secretSealed: secret_sealed,
      }));
    },

    /**
     * Records one attempt of a claimed delivery (the `attempts` it was claimed
     * with: a replica whose hold ran out records nothing). A failed delivery
     * counts against its subscription, which is disabled, with a
     * webhook.disabled event, after `disableAfter` in a row; one delivered
     * resets the count.
     */
    async record(
      claimed: Row,
      outcome: AttemptOutcome,
      error: string | undefined,
      retryWindowMs: number,
    ): Promise<void> {
      await db.transaction().execute(async (tx) => {
        const tried: WebhookTry = {
          at: new Date().toISOString(),
          responseCode: outcome.responseCode,
          error,
        };
        const tries = JSON.stringify([...claimed.tries, tried].slice(-maxTries));
        const base = { response_code: outcome.responseCode ?? null, last_error: error ?? null };
        let q = tx
          .updateTable("webhook_deliveries")
          .where("id", "=", claimed.id)
          .where("attempts", "=", claimed.attempts)
          .where("status", "=", "pending");
        let kind = outcome.kind;
        if (kind === "retry") {
          const delay = (outcome as { delayMs: number }).delayMs;
          const started = (claimed.first_attempt_at ?? new Date()).getTime();
          if (Date.now() + delay > started + retryWindowMs) kind = "failed";
          else
            q = q.set({
              ...base,
              tries,
              locked_until: null,
              next_attempt_at: sql<Date>`now() + make_interval(secs => ${delay / 1000})`,
            });
        }
        if (kind !== "retry")
          q = q.set({
            ...base,
            tries,
            locked_until: null,
            status: kind,
            finished_at: sql<Date>`now()`,
          });
        const { numUpdatedRows } = await q.executeTakeFirst();
        if (!numUpdatedRows || kind === "retry") return;
        const sub = await tx
          .updateTable("webhook_subscriptions")
          .set({
            failed_in_a_row: kind === "delivered" ? 0 : sql<number>`failed_in_a_row + 1`,
          })
          .where("id", "=", claimed.subscription_id)
          .returning(["id", "workspace_id", "failed_in_a_row", "enabled"])
          .executeTakeFirst();
        if (!sub || kind === "delivered" || !sub.enabled || sub.failed_in_a_row < disableAfter)
          return;
        const reason = `${sub.failed_in_a_row} deliveries failed in a row`;
        await tx
          .updateTable("webhook_subscriptions")
          .set({ enabled: false, disabled_reason: reason })
          .where("id", "=", sub.id)
          .execute();
        await recordEvent(tx, {
          type: "webhook.disabled",
          workspaceId: sub.workspace_id,
          data: { subscriptionId: sub.id, reason, lastDeliveryId: claimed.id },
        });
      });
    },

    /** A subscription's deliveries, newest first. */
    async log(subscriptionId: string, pageSize: number): Promise<Delivery[]> {
      const sid = checkRowId("id", "webhook subscription", subscriptionId);
      const exists = await db
        .selectFrom("webhook_subscriptions")
        .select("id")
        .where("id", "=", sid)
        .executeTakeFirst();
      if (!exists) noSubscription(sid);
      const rows = await db
        .selectFrom("webhook_deliveries")
        .selectAll()
        .where("subscription_id", "=", sid)
        .orderBy("event_id", "desc")
        .limit(Math.min(Math.max(pageSize || 100, 1), 1000))
        .execute();
      return rows.map(deliveryView);
    },

    /** Sends a delivery that ended (failed or delivered) again, with its id and body. */
    async redeliver(deliveryId: string): Promise<Delivery> {
      const id = checkRowId("deliveryId", "webhook delivery", deliveryId);
      const row = await db
        .updateTable("webhook_deliveries")
        .set({
          status: "pending",
          first_attempt_at: null,
          next_attempt_at: sql<Date>`now()`,
          locked_until: null,
          finished_at: null,
        })
        .where("id", "=", id)
        .where("status", "<>", "pending")
        .returningAll()
        .executeTakeFirst();
      if (row) return deliveryView(row);
      const pending = await db
        .selectFrom("webhook_deliveries")
        .select("id")
        .where("id", "=", id)
        .executeTakeFirst();
      throw pending
        ? new ConnectError(`delivery ${id} is still pending; it is sent again`, Code.Aborted)
        : new ConnectError(`no webhook delivery ${id}`, Code.NotFound);
    },
  };
}
