import { Code, ConnectError } from "@connectrpc/connect";

// TODO(merge): fold into time-range.ts on merge — helper "o-history" writes the
// one parser of `since`/`until` there; this minimal copy exists only because
// it could not be imported yet. The accepted forms are the same.

/** The forms a `since` may take, as a refusal names them. */
export const sinceForms = "an RFC 3339 time (2026-11-29T09:30:00Z), Unix seconds (1795000000), a duration back from now (720h, 90m, 30s) or days (7d)";

const relative = /^(\d{1,9})([dhms])$/;
const unitMs = { d: 86_400_000, h: 3_600_000, m: 60_000, s: 1000 } as const;
const rfc3339 = /^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/;

/** Whether the fields of an RFC 3339 match name a real day and time (Date itself rolls 02-30 over into March). */
function realFields(m: RegExpExecArray): boolean {
  const [y, mo, d, h, mi, se] = m.slice(1, 7).map(Number) as [number, number, number, number, number, number];
  const day = new Date(Date.UTC(y, mo - 1, d));
  return day.getUTCMonth() === mo - 1 && day.getUTCDate() === d && h < 24 && mi < 60 && se < 61;
}

/** Parses `since` (empty: `fallback` back from now) into a time; invalid_argument naming the forms when it is none of them. */
export function parseSince(field: string, value: string, fallback: string, nowMs: number = Date.now()): Date {
  const text = value.trim() || fallback;
  const rel = relative.exec(text);
  if (rel) return new Date(nowMs - Number(rel[1]) * unitMs[rel[2] as keyof typeof unitMs]);
  if (/^\d{1,12}$/.test(text)) return new Date(Number(text) * 1000);
  const m = rfc3339.exec(text);
  if (m && realFields(m)) {
    const at = new Date(text);
    if (!Number.isNaN(at.getTime())) return at;
  }
  throw new ConnectError(`${field} ${JSON.stringify(text.slice(0, 60))} is not a time; give ${sinceForms}`, Code.InvalidArgument);
}
