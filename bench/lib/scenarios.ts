import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";

/**
 * The scenarios of `npm run bench`, in the order of the issue. Each is a
 * script bench/<name>.ts that takes --size tiny|full, prints one table and
 * writes bench/results/<name>.json; one missing from this checkout is
 * skipped.
 */
export const scenarios = [
  "lease-throughput",
  "pickup-latency",
  "streams-ingest",
  "connections",
  "queue-scale",
  "enqueue-throughput",
  "webhook-latency",
] as const;

/** The script of a scenario. */
export function scenarioScript(name: string): string {
  return fileURLToPath(new URL(`../${name}.ts`, import.meta.url));
}

/** The scenarios whose script is in this checkout. */
export function presentScenarios(): string[] {
  return scenarios.filter((s) => existsSync(scenarioScript(s)));
}
