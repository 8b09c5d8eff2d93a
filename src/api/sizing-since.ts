import { Code, ConnectError } from "@connectrpc/connect";

// TODO(merge): fold into time-range.ts on merge — helper "o-history" writes the
// one parser of `since`/`until` there; this minimal copy exists only because
// it could not be imported yet. The accepted forms are the same.

/** The forms a `since` may take, as a refusal names them. */
export const sinceForms = "an RFC 3339 time (2026-11-29T09:30:00Z), Unix seconds (1795000000), a duration back from now (720h, 90m, 30s) or days (7d)";

const relative = /^(\d{1,9})([dhms])$/;
const unitMs = { d: 86_400_000, h: 3_600_000, m: 60_000, s: 1000 } as const;
const rfc3339 = /^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/;

/** Parses `since` (empty: `fallback` back from now) into a time; invalid_argument naming the forms when it is none of them. */
export function parseSince(field: string, value: string, fallback: string, nowMs: number = Date.now()): Date {
  const text = value.trim() || fallback;
  const rel = relative.exec(text);
  if (rel) return new Date(nowMs - Number(rel[1]) * unitMs[rel[2] as keyof typeof unitMs]);
  if (/^\d{1,12}$/.test(text)) return new Date(Number(text) * 1000);
  if (rfc3339.test(text)) {
    const at = new Date(text);
    if (!Number.isNaN(at.getTime())) return at;
  }
  throw new ConnectError(`${field} ${JSON.stringify(text.slice(0, 60))} is not a time; give ${sinceForms}`, Code.InvalidArgument);
}
