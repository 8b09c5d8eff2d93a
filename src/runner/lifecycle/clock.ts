/** The runner's wall clock in nanoseconds since the epoch, with sub-millisecond resolution. */
function wallClockNs(): bigint {
  return BigInt(Math.round((performance.timeOrigin + performance.now()) * 1e6));
}

/**
 * One clock reading: when the request left, what the server said, when the reply came back (runner
 * clock).
 */
interface ClockSample {
  readonly sentNs: bigint;
  readonly serverNs: bigint;
  readonly receivedNs: bigint;
}

/**
 * The measured offset: runner clock minus control-plane clock, from the sample with the least round
 * trip.
 */
export interface ClockOffset {
  readonly offsetNs: bigint;
  readonly roundTripNs: bigint;
  readonly samples: number;
}

/**
 * Estimates runner clock minus server clock from `count` readings of
 * `serverNow`. The server read its clock somewhere inside each round trip;
 * assuming the middle, the error is at most half the round trip, so the
 * sample with the least round trip is the best one (NTP's rule, simplified).
 */
export async function measureClockOffset(
  serverNow: () => Promise<bigint>,
  count = 5,
  now: () => bigint = wallClockNs,
): Promise<ClockOffset> {
  let best: ClockSample | undefined;
  for (let i = 0; i < count; i++) {
    const sentNs = now();
    const serverNs = await serverNow();
    const receivedNs = now();
    const sample = { sentNs, serverNs, receivedNs };
    if (!best || roundTrip(sample) < roundTrip(best)) best = sample;
  }
  if (!best) throw new Error("measureClockOffset needs at least one sample");
  const midpoint = (best.sentNs + best.receivedNs) / 2n;
  return { offsetNs: midpoint - best.serverNs, roundTripNs: roundTrip(best), samples: count };
}

function roundTrip(s: ClockSample): bigint {
  return s.receivedNs - s.sentNs;
}

/**
 * Control-plane time as the runner estimates it: its own clock corrected by the measured offset.
 */
export interface ServerClock {
  /** Estimated control-plane time, in milliseconds since the epoch. */
  nowMs(): number;
  readonly offsetNs: bigint;
}

/** A server clock from a measured offset (runner minus server). */
export function serverClock(offsetNs: bigint, localNowMs: () => number = Date.now): ServerClock {
  const offsetMs = Number(offsetNs) / 1e6;
  return { offsetNs, nowMs: () => localNowMs() - offsetMs };
}
