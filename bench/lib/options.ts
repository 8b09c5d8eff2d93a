import { parseArgs, type ParseArgsConfig } from "node:util";

/** The sizes a scenario runs at: the published one, or a few seconds' worth for the smoke test. */
type BenchSize = "full" | "tiny";

/** What every scenario reads from its flags and environment. */
export interface CommonOptions {
  readonly size: BenchSize;
  /**
   * postgres:// URL of a server the benchmark may create databases on; undefined means embedded
   * only.
   */
  readonly databaseUrl: string | undefined;
  /** Name of the database the benchmark creates (and drops) on that server. */
  readonly databaseName: string;
}

/**
 * Parses `--size tiny|full` (or BENCH_SIZE), `--database-name` (or
 * BENCH_DATABASE), DATABASE_URL, and the scenario's own flags.
 */
export function parseOptions(
  argv: readonly string[],
  own: Record<string, "string" | "boolean"> = {},
): CommonOptions & { readonly flags: Readonly<Record<string, string | boolean | undefined>> } {
  const ownConfig: NonNullable<ParseArgsConfig["options"]> = Object.fromEntries(
    Object.entries(own).map(([k, type]) => [k, { type }]),
  );
  const { values } = parseArgs({
    args: [...argv],
    options: { size: { type: "string" }, "database-name": { type: "string" }, ...ownConfig },
    allowPositionals: false,
  });
  const size = String(values.size ?? process.env.BENCH_SIZE ?? "full");
  if (size !== "full" && size !== "tiny")
    throw new Error(`--size must be full or tiny; got ${JSON.stringify(size)}`);
  const databaseName = String(
    values["database-name"] ?? process.env.BENCH_DATABASE ?? "forelead_bench",
  );
  if (!/^[a-z_][a-z0-9_]{0,50}$/.test(databaseName))
    throw new Error(
      `--database-name ${JSON.stringify(databaseName)} must be a plain lower-case identifier`,
    );
  return {
    size,
    databaseUrl: process.env.DATABASE_URL || undefined,
    databaseName,
    flags: values as Record<string, string | boolean | undefined>,
  };
}

/** A whole number from a flag, within bounds, or the default. */
export function intFlag(
  value: unknown,
  name: string,
  fallback: number,
  min = 1,
  max = 10_000_000,
): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < min || n > max)
    throw new Error(
      `--${name} must be a whole number from ${min} to ${max}; got ${JSON.stringify(value)}`,
    );
  return n;
}

/** A comma-separated list of whole numbers (at least `min`) from a flag, or the default. */
export function intListFlag(
  value: unknown,
  name: string,
  fallback: readonly number[],
  min = 1,
): number[] {
  if (value === undefined) return [...fallback];
  return String(value)
    .split(",")
    .map((v) => intFlag(v.trim(), name, 0, min));
}
