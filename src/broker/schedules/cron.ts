// A schedule's cron expression and time zone: parsed, and its due times computed, by croner (the
// one cron library here: time zones, a seconds field, @hourly-style names, DST).
import { Cron } from "croner";
import { bad } from "../jobs/rules.js";

/** The names croner knows and this control plane accepts in place of fields. */
const cronNames = ["@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"];

/** A parsed cron expression in its time zone. */
export interface CronTimes {
  /** The first due time strictly after `after`, or undefined when there is none. */
  next(after: Date): Date | undefined;
  /** Up to `n` due times strictly before `before`, newest first. */
  previous(n: number, before: Date): Date[];
}

/**
 * Checks a time zone: an IANA name the runtime knows ("Europe/Berlin", "UTC"); throws
 * invalid_argument naming `timeZone`.
 */
function checkTimeZone(timeZone: string): void {
  try {
    new Intl.DateTimeFormat("en", { timeZone });
  } catch {
    bad(
      `timeZone ${JSON.stringify(timeZone.slice(0, 80))} is not an IANA time zone, ` +
        `e.g. "UTC" or "Europe/Berlin"`,
    );
  }
}

/**
 * Parses `cron` in `timeZone`: 5 fields (minute hour day-of-month month day-of-week), 6 with a
 * seconds field first, or one of cronNames. Throws invalid_argument naming `cron` (or
 * `timeZone`).
 */
export function parseCron(cron: string, timeZone: string): CronTimes {
  checkTimeZone(timeZone);
  const text = cron.trim();
  const fields = text.split(/\s+/).length;
  const named = text.startsWith("@");
  if (named ? !cronNames.includes(text.toLowerCase()) : fields !== 5 && fields !== 6)
    bad(
      `cron ${JSON.stringify(cron.slice(0, 80))} is not a cron expression: 5 fields ` +
        `(minute hour day month weekday), 6 with seconds first, or one of ${cronNames.join(", ")}`,
    );
  let parsed: Cron;
  try {
    // Without a function croner schedules nothing: it only computes times.
    parsed = new Cron(text, { timezone: timeZone, mode: "5-or-6-parts" });
  } catch (err) {
    bad(
      `cron ${JSON.stringify(cron.slice(0, 80))} is not a cron expression: ` +
        `${err instanceof Error ? err.message : String(err)}`,
    );
  }
  if (!parsed.nextRun(new Date()))
    bad(`cron ${JSON.stringify(cron.slice(0, 80))} has no due time after now`);
  return {
    next(after) {
      // nextRun counts from `after`'s whole second; strictly later is this interface's promise.
      const t = parsed.nextRun(after);
      return t && t <= after
        ? (parsed.nextRun(new Date(after.getTime() + 1000)) ?? undefined)
        : (t ?? undefined);
    },
    // previousRuns may repeat a time next to a DST change; each due time counts once.
    previous: (n, before) => [
      ...new Map(parsed.previousRuns(n, before).map((t) => [t.getTime(), t])).values(),
    ],
  };
}
