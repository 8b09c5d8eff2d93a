import { resolve } from "node:path";
import { InvalidArgumentError, Option } from "commander";

/** A commander argument parser for whole numbers in a range. */
export function integerIn(name: string, min: number, max: number): (value: string) => number {
  return (value) => {
    const n = Number(value);
    if (!/^-?\d+$/.test(value) || n < min || n > max)
      throw new InvalidArgumentError(
        `${name} must be a whole number from ${min} to ${max}; got ${JSON.stringify(value)}`,
      );
    return n;
  };
}

/**
 * Collects a repeatable comma-separated list option (`--labels a,b --labels c`) into one array,
 * blanks dropped.
 */
export function collectList(value: string, previous: string[] = []): string[] {
  return [
    ...previous,
    ...value
      .split(",")
      .map((v) => v.trim())
      .filter(Boolean),
  ];
}

/** Collects a repeatable option into an array. */
export function collect(value: string, previous: string[] = []): string[] {
  return [...previous, value];
}

/**
 * A file or directory flag, resolved against the directory the command was
 * started in (its default too), so every later use — git run with another
 * working directory, a child process, a log line — sees the same absolute
 * path. Help shows the default as written.
 */
export function pathOption(flags: string, description: string, defaultPath?: string): Option {
  const option = new Option(flags, description).argParser((value: string) => resolve(value));
  return defaultPath === undefined ? option : option.default(resolve(defaultPath), defaultPath);
}

/** All of standard input as UTF-8 text (a file argument of "-"). */
export async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}
