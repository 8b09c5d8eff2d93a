// <Time>: a moment in the browser's time zone, with its UTC form on hover (title) and in datetime.
import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";

export type Moment = Timestamp | Date | undefined;

/** The Date of a protobuf Timestamp or Date; undefined for none (or the zero timestamp). */
export function toDate(at: Moment): Date | undefined {
  if (!at) return undefined;
  if (at instanceof Date) return at;
  if (at.seconds === 0n && at.nanos === 0) return undefined;
  return timestampDate(at);
}

const local = new Intl.DateTimeFormat(undefined, {
  year: "numeric",
  month: "short",
  day: "numeric",
  hour: "2-digit",
  minute: "2-digit",
  second: "2-digit",
});

/** Shows `at` in the local zone; "-" when unset. */
export function Time({ at }: { at: Moment }) {
  const d = toDate(at);
  if (!d) return <span class="muted">-</span>;
  const utc = d.toISOString();
  return (
    <time dateTime={utc} title={`${utc.replace("T", " ").replace(/\.\d+Z$/, "")} UTC`}>
      {local.format(d)}
    </time>
  );
}

/** A duration in seconds as "4 s", "3 min 5 s", "2 h 10 min". */
export function formatSeconds(s: number): string {
  if (!Number.isFinite(s) || s < 0) return "-";
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
  return `${Math.floor(s / 3600)} h ${Math.round((s % 3600) / 60)} min`;
}
