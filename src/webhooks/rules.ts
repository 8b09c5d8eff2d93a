import { Code, ConnectError } from "@connectrpc/connect";
import { eventTypes } from "../events/record.js";

// What a subscription may say, checked before anything is stored: each refusal
// is invalid_argument naming the field, and never repeats the secret.

/** Bytes a subscription's secret has at least (and at most). */
const secretBytes = { min: 16, max: 1024 } as const;

/** Most entries in a subscription's `events`. */
const maxPatterns = 100;

/** A subscription as asked for, before it is stored. */
export interface SubscriptionInput {
  readonly workspaceId: string;
  readonly url: string;
  readonly events: readonly string[];
  readonly secret: string;
}

/** The checked form: the URL normalized, patterns de-duplicated. */
export interface CheckedSubscription {
  readonly workspaceId: string | null;
  readonly url: string;
  readonly events: string[];
  readonly secret: string;
}

const bad = (message: string): never => {
  throw new ConnectError(message, Code.InvalidArgument);
};

/**
 * Checks a new subscription: an https URL (plain http only under
 * --webhook-allow-private, for private addresses), a secret of 16 bytes or
 * more, and event types of the global event stream (`job.settled`), families
 * (`job.*`) or `*`.
 */
export function checkSubscription(
  input: SubscriptionInput,
  allowPrivate: boolean,
): CheckedSubscription {
  if (input.workspaceId.length > 200) bad("workspaceId is longer than 200 characters");
  const url = checkUrl(input.url, allowPrivate);
  const events = checkEventPatterns(input.events);
  const bytes = Buffer.byteLength(input.secret, "utf8");
  if (bytes < secretBytes.min)
    bad(`secret must be at least ${secretBytes.min} bytes; it has ${bytes}`);
  if (bytes > secretBytes.max) bad(`secret must be at most ${secretBytes.max} bytes`);
  return { workspaceId: input.workspaceId || null, url, events, secret: input.secret };
}

function checkUrl(text: string, allowPrivate: boolean): string {
  if (!text) bad("url is required (https://host/path)");
  if (text.length > 2000) bad("url is longer than 2000 characters");
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return bad(`url ${JSON.stringify(text.slice(0, 200))} is not a URL (https://host/path)`);
  }
  if (url.protocol === "http:" && !allowPrivate)
    bad(
      "url must be https; plain http is allowed only to private addresses, " +
        "under forelead serve --webhook-allow-private",
    );
  if (url.protocol !== "https:" && url.protocol !== "http:")
    bad(`url must be https, not ${url.protocol.slice(0, -1).slice(0, 20)}`);
  if (url.username || url.password)
    bad("url must not carry a user name or password; the secret signs each delivery");
  if (url.hash) bad("url must not have a fragment (#...)");
  return url.href;
}

/** Checks `events`: each a type of the stream, a family `x.*` that has types, or `*`. */
function checkEventPatterns(patterns: readonly string[]): string[] {
  if (patterns.length === 0)
    bad('events must name at least one event type, e.g. ["job.settled"] or ["job.*"]');
  if (patterns.length > maxPatterns) bad(`events has more than ${maxPatterns} entries`);
  const types = eventTypes as readonly string[];
  patterns.forEach((p, i) => {
    if (p === "*" || types.includes(p)) return;
    const family = p.endsWith(".*") ? p.slice(0, -1) : undefined;
    if (family && types.some((t) => t.startsWith(family))) return;
    bad(
      `events[${i}] ${JSON.stringify(p.slice(0, 60))} is not an event type; one of ` +
        `${eventTypes.join(", ")}, a family such as job.*, or *`,
    );
  });
  return [...new Set(patterns)];
}
