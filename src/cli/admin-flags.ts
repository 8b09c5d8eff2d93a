import { readFile } from "node:fs/promises";
import { InvalidArgumentError } from "commander";
import { parseDuration } from "../identity/ca.js";

/** Reads a file a flag names, with an error naming the flag. */
export async function readFlagFile(file: string, flag: string): Promise<string> {
  try {
    return await readFile(file, "utf8");
  } catch (err) {
    throw new Error(
      `${flag} ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
    );
  }
}

/**
 * A commander parser for a duration flag ("600s", "10m", "2h"), in seconds (rounded);
 * `wholeSeconds` refuses anything under 1 s or not a whole number of seconds.
 */
export function secondsFlag(
  flag: string,
  options: { readonly wholeSeconds?: boolean } = {},
): (value: string) => number {
  return (value) => {
    let ms = NaN;
    try {
      ms = parseDuration(value);
    } catch {
      // refused below
    }
    if (Number.isNaN(ms))
      throw new InvalidArgumentError(
        `${flag} ${JSON.stringify(value)} is not a duration; use e.g. 600s, 10m, 2h`,
      );
    if (options.wholeSeconds && (ms < 1000 || ms % 1000 !== 0))
      throw new InvalidArgumentError(
        `${flag} must be a duration of whole seconds such as 6h, 90m or 30s; got ${JSON.stringify(value)}`,
      );
    return Math.round(ms / 1000);
  };
}

/**
 * A commander parser for a point in time: RFC 3339, or a duration meaning "that long ago" ("1h").
 */
export function timeFlag(flag: string): (value: string) => Date {
  return (value) => {
    if (/^\d+[dhms]/.test(value)) {
      try {
        return new Date(Date.now() - parseDuration(value));
      } catch {
        // fall through to the date form
      }
    }
    const date = new Date(value);
    if (Number.isNaN(date.getTime()) || !/^\d{4}-\d{2}-\d{2}/.test(value)) {
      throw new InvalidArgumentError(
        `${flag} ${JSON.stringify(value)} is neither a time (2026-11-29T09:30:00Z) nor a duration ago (1h, 30m)`,
      );
    }
    return date;
  };
}
