import { sql, type Kysely } from "kysely";
import type { Database } from "./schema.js";
import { logUnlessUnreachable } from "./unreachable.js";

/**
 * The database's clock, read without a query per call: the offset between
 * this process's clock and the database's is sampled at start and then once a
 * minute (the sample with the shortest round trip wins). Leases expire by the
 * database's now(), so runners must compare against this clock, not against
 * one replica's.
 */
export interface DbClock {
  /** Database time now, in nanoseconds since the epoch. */
  nowNs(): bigint;
  close(): void;
}

/** Samples the database clock and keeps the offset fresh. */
export async function createDbClock(
  db: Kysely<Database>,
  options: { resampleMs?: number } = {},
): Promise<DbClock> {
  let offsetMs = 0;
  const sample = async () => {
    let best = { rtt: Infinity, offset: 0 };
    for (let i = 0; i < 3; i++) {
      const t0 = performance.timeOrigin + performance.now();
      const { rows } = await sql<{
        ms: number;
      }>`select extract(epoch from clock_timestamp()) * 1000 as ms`.execute(db);
      const t1 = performance.timeOrigin + performance.now();
      const dbMs = Number(rows[0]?.ms);
      if (t1 - t0 < best.rtt) best = { rtt: t1 - t0, offset: dbMs - (t0 + t1) / 2 };
    }
    offsetMs = best.offset;
  };
  await sample();
  const timer = setInterval(
    () =>
      void sample().catch((err) =>
        logUnlessUnreachable(
          "clock: could not sample the database clock (the last offset stays in use)",
          err,
        ),
      ),
    options.resampleMs ?? 60_000,
  );
  timer.unref();
  return {
    nowNs: () => BigInt(Math.round((performance.timeOrigin + performance.now() + offsetMs) * 1e6)),
    close: () => clearInterval(timer),
  };
}
