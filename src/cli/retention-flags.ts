import { InvalidArgumentError, Option, type Command } from "commander";
import {
  minimumRetentionMs,
  retentionKinds,
  retentionRules,
  type RetentionKind,
  type Retentions,
} from "../ops/retention-kinds.js";
import { secondsFlag } from "./admin-flags.js";

/** The key commander gives a kind's flag ("--job-retention" → "jobRetention"). */
function flagKey(kind: RetentionKind): string {
  return retentionRules[kind].flag.slice(2).replace(/-(.)/g, (_, c: string) => c.toUpperCase());
}

/** A parser of a kind's flag: a duration of whole seconds, at least the kind's minimum. */
function retentionFlag(kind: RetentionKind): (value: string) => number {
  const { flag, minimumText } = retentionRules[kind];
  const seconds = secondsFlag(flag, { wholeSeconds: true });
  return (value) => {
    const s = seconds(value);
    if (s * 1000 < minimumRetentionMs(kind))
      throw new InvalidArgumentError(
        `${flag} ${value} is shorter than its minimum of ${minimumText}; ` +
          `give ${minimumText} or more (docs/retention.md)`,
      );
    return s;
  };
}

/** Adds a retention flag per kind (`--job-retention 30d`, ...) to `forelead serve`. */
export function addRetentionOptions(command: Command): Command {
  for (const kind of retentionKinds) {
    const rule = retentionRules[kind];
    command.addOption(
      new Option(
        `${rule.flag} <duration>`,
        `${rule.help} (default: ${rule.defaultText}; at least ${rule.minimumText})`,
      ).argParser(retentionFlag(kind)),
    );
  }
  return command;
}

/** The retentions the flags gave, in milliseconds; a kind not given is left out (its default). */
export function retentionsFromFlags(flags: object): Partial<Retentions> {
  const given = flags as Record<string, number | undefined>;
  const out: Partial<Record<RetentionKind, number>> = {};
  for (const kind of retentionKinds) {
    const seconds = given[flagKey(kind)];
    if (seconds !== undefined) out[kind] = seconds * 1000;
  }
  return out;
}
