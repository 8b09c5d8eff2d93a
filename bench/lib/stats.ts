/** Latency figures in milliseconds, rounded for tables and JSON. */
export interface LatencySummary {
  readonly count: number;
  readonly p50: number;
  readonly p90: number;
  readonly p99: number;
  readonly max: number;
  readonly mean: number;
}

/** Nearest-rank percentiles of `samples` (milliseconds); an empty list gives zeros. */
export function summarize(samples: readonly number[]): LatencySummary {
  if (samples.length === 0) return { count: 0, p50: 0, p90: 0, p99: 0, max: 0, mean: 0 };
  const sorted = Float64Array.from(samples).sort();
  const at = (q: number) =>
    sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
  const mean = sorted.reduce((a, b) => a + b, 0) / sorted.length;
  return {
    count: sorted.length,
    p50: round(at(0.5)),
    p90: round(at(0.9)),
    p99: round(at(0.99)),
    max: round(sorted[sorted.length - 1]!),
    mean: round(mean),
  };
}

/** `n` rounded to `digits` decimal places (3: enough for milliseconds and ratios). */
export function round(n: number, digits = 3): number {
  const f = 10 ** digits;
  return Math.round(n * f) / f;
}

/** `a / b` rounded, or null when there is nothing to divide by. */
export function ratio(a: number | undefined, b: number | undefined): number | null {
  return a && b ? round(a / b, 2) : null;
}

/** Milliseconds since an arbitrary origin, sub-millisecond. */
export function nowMs(): number {
  return performance.now();
}

/**
 * Wall-clock milliseconds since the epoch with sub-millisecond resolution, comparable across
 * processes on one machine.
 */
export function epochMs(): number {
  return performance.timeOrigin + performance.now();
}
