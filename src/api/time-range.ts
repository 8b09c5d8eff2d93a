import { Code, ConnectError } from "@connectrpc/connect";

/** The forms a time bound takes, as the refusal of a bad one names them. */
const timeBoundForms =
  'RFC 3339 ("2026-11-29T09:30:00Z"), Unix seconds ("1796031000"), a ' +
  'duration before now ("720h", "90m", "45s") or days before now ("30d")';

const rfc3339 =
  /^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$/;
const unixSeconds = /^\d{1,11}$/;
const duration = /^(\d{1,9})([dhms])$/;
const unitMs: Record<string, number> = { d: 86_400_000, h: 3_600_000, m: 60_000, s: 1000 };

/**
 * A duration of one number and unit (d, h, m or s: "45s", "90m", "720h",
 * "30d") in milliseconds; undefined when `text` is not one.
 */
export function parseDuration(text: string): number | undefined {
  const m = duration.exec(text.trim());
  return m ? Number(m[1]) * unitMs[m[2]!]! : undefined;
}

/**
 * A time bound as tie takes it (`since`, `until`): RFC 3339, Unix seconds, a
 * duration before `now` (one number and unit: h, m or s) or days before now
 * (`30d`). Anything else is invalid_argument naming the field and the forms.
 */
export function parseTimeBound(field: string, text: string, now: Date): Date {
  const value = text.trim();
  const relative = parseDuration(value);
  if (relative !== undefined) return new Date(now.getTime() - relative);
  if (unixSeconds.test(value)) return new Date(Number(value) * 1000);
  const fields = rfc3339.exec(value);
  if (fields && realFields(fields)) {
    const at = new Date(value);
    if (!Number.isNaN(at.getTime())) return at;
  }
  throw new ConnectError(
    `${field} ${JSON.stringify(value.slice(0, 60))} is not a time; use ${timeBoundForms}`,
    Code.InvalidArgument,
  );
}

/**
 * Whether the fields of an RFC 3339 match name a real day and time (Date itself rolls 02-30 over
 * into March).
 */
function realFields(m: RegExpExecArray): boolean {
  const [y, mo, d, h, mi, se] = m.slice(1, 7).map(Number) as [
    number,
    number,
    number,
    number,
    number,
    number,
  ];
  const day = new Date(Date.UTC(y, mo - 1, d));
  return day.getUTCMonth() === mo - 1 && day.getUTCDate() === d && h < 24 && mi < 60 && se < 61;
}

/** A window [since, until). */
export interface TimeRange {
  readonly since: Date;
  readonly until: Date;
}

/**
 * The window of `since` and `until` (either may be empty: `defaults` fills
 * it in, or it stays unbounded when `defaults` has none); until must not be
 * before since.
 */
export function parseTimeRange(
  input: { readonly since: string; readonly until: string },
  now: Date,
  defaults: { readonly since?: string } = {},
): Partial<TimeRange> {
  const sinceText = input.since || defaults.since || "";
  const since = sinceText ? parseTimeBound("since", sinceText, now) : undefined;
  const until = input.until ? parseTimeBound("until", input.until, now) : undefined;
  if (since && until && until.getTime() < since.getTime()) {
    throw new ConnectError(
      `until (${until.toISOString()}) is before since ` +
        `(${since.toISOString()}); give a window that ends after it starts`,
      Code.InvalidArgument,
    );
  }
  return { since, until };
}
