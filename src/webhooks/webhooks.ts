import { createSecureContext, rootCertificates } from "node:tls";
import { webhookSecretBinding } from "../secrets/bindings.js";
import type { SecretBox } from "../secrets/box.js";
import { eventsChannel } from "../events/record.js";
import type { Store } from "../store/database.js";
import { createNotifyWaiters } from "../store/notify-waiters.js";
import { logUnlessUnreachable } from "../store/unreachable.js";
import { createDeliveries, deliveryBody, type ClaimedDelivery } from "./deliveries.js";
import { DestinationRefused, resolveDestination, type Resolve } from "./destination.js";
import { checkSubscription, type SubscriptionInput } from "./rules.js";
import { post, type AttemptResult } from "./send.js";
import { createSubscriptions } from "./subscriptions.js";

/** How webhooks are delivered (forelead serve --webhook-*); each omitted takes its default. */
export interface WebhookOptions {
  /** Deliver to loopback, private and link-local addresses, and by plain http to them. */
  readonly allowPrivate?: boolean;
  /** PEM certificates trusted for receivers, besides the system's (--webhook-ca). */
  readonly ca?: readonly string[];
  /** One attempt's bound; 10 s by default. */
  readonly timeoutMs?: number;
  /** How long a delivery is retried from its first attempt; 1 hour by default. */
  readonly retryWindowMs?: number;
  /** The first retry's delay, doubled each time (with jitter); 1 s by default. */
  readonly backoffMs?: number;
  /** The longest delay between two attempts; 5 minutes by default. */
  readonly maxBackoffMs?: number;
  /** Failed deliveries in a row that disable a subscription; 5 by default. */
  readonly disableAfter?: number;
  /** How often a replica looks for due retries without an event; 1 s by default. */
  readonly pollMs?: number;
  /** How host names are resolved (node:dns by default). */
  readonly resolve?: Resolve;
}

/** Deliveries one replica has in flight at most. */
const concurrency = 16;

/**
 * Webhooks: subscriptions, their deliveries and the loop that sends them.
 * Every replica runs the loop; the claim (deliveries.ts) keeps two from
 * sending one delivery at once.
 */
export async function createWebhooks(store: Store, box: SecretBox, options: WebhookOptions) {
  const allowPrivate = options.allowPrivate ?? false;
  const timeoutMs = options.timeoutMs ?? 10_000;
  const retryWindowMs = options.retryWindowMs ?? 3600_000;
  const backoffMs = options.backoffMs ?? 1_000;
  const maxBackoffMs = options.maxBackoffMs ?? 300_000;
  const pollMs = options.pollMs ?? 1_000;
  // The trust of --webhook-ca, built once: a context made per POST from the ~140 system roots
  // plus these cost more CPU than the rest of a delivery (docs/performance.md, section 9).
  const secureContext = options.ca?.length
    ? createSecureContext({ ca: [...rootCertificates, ...options.ca] })
    : undefined;
  const subscriptions = createSubscriptions(store.db, box);
  const deliveries = createDeliveries(store.db, options.disableAfter ?? 5);

  /** Equal jitter: half the doubled delay, plus a random part of the other half. */
  const backoff = (attempt: number) => {
    const d = Math.min(maxBackoffMs, backoffMs * 2 ** Math.max(0, attempt - 1));
    return Math.round(d / 2 + (Math.random() * d) / 2);
  };

  const attempt = async (c: ClaimedDelivery): Promise<void> => {
    const { row } = c;
    let result: AttemptResult;
    try {
      const to = await resolveDestination(c.url, allowPrivate, options.resolve);
      result = await post(
        to,
        {
          deliveryId: row.id,
          eventType: row.event_type,
          body: deliveryBody(row),
          secret: box.open(c.secretSealed, webhookSecretBinding(row.subscription_id)),
        },
        { timeoutMs, secureContext },
      );
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      result = { error: message.slice(0, 300), retryable: !(err instanceof DestinationRefused) };
    }
    if ("responseCode" in result) {
      const code = result.responseCode;
      const outcome =
        code >= 200 && code < 300
          ? ({ kind: "delivered", responseCode: code } as const)
          : code >= 500
            ? ({ kind: "retry", delayMs: backoff(row.attempts), responseCode: code } as const)
            : ({ kind: "failed", responseCode: code } as const);
      const error = outcome.kind === "delivered" ? undefined : `the receiver answered ${code}`;
      await deliveries.record(row, outcome, error, retryWindowMs);
    } else {
      const outcome = result.retryable
        ? ({ kind: "retry", delayMs: backoff(row.attempts) } as const)
        : ({ kind: "failed" } as const);
      await deliveries.record(row, outcome, result.error, retryWindowMs);
    }
  };

  // The loop: claim what is due, send it, record it; wait for an event's commit or pollMs.
  const waiters = createNotifyWaiters<undefined, undefined, true>();
  const wakeAll = () => waiters.wakeAll(true);
  const unlisten = await waiters.listen(store, eventsChannel, wakeAll, wakeAll);
  const stop = new AbortController();
  const leaseMs = timeoutMs * 2 + 5_000;
  const loop = async () => {
    while (!stop.signal.aborted) {
      const waiter = waiters.arm(undefined, undefined);
      try {
        const claimed = await deliveries.claim(concurrency, leaseMs);
        await Promise.all(
          claimed.map((c) =>
            attempt(c).catch((err) => logUnlessUnreachable("webhooks: delivery failed", err)),
          ),
        );
        if (claimed.length === 0) await waiter.wait(pollMs, stop.signal);
      } catch (err) {
        logUnlessUnreachable("webhooks: claim failed", err);
        await waiter.wait(pollMs, stop.signal);
      } finally {
        waiter.cancel();
      }
    }
  };
  const running = loop();

  return {
    subscriptions,
    deliveries,
    /** Checks and stores a new subscription (its secret sealed). */
    create: (input: SubscriptionInput, createdBy: string) =>
      subscriptions.create(checkSubscription(input, allowPrivate), createdBy),
    async close() {
      stop.abort();
      await running;
      await unlisten();
    },
  };
}

/** The webhooks facade. */
export type Webhooks = Awaited<ReturnType<typeof createWebhooks>>;
