// Rate limits: named limits of job starts per second or per minute, across all replicas
// (rate_limits). The claim (forelead_claim, forelead_rate_limit_room) is the one home of the rule;
// this sets, creates and reads the limits.
import { sql, type Kysely } from "kysely";
import type { Database } from "../../store/schema.js";
import { checkSegmentId } from "../../identity/segment-id.js";
import { bad } from "./rules.js";

/** The most starts a limit may allow per window. */
const maxStartsPerWindow = 10_000;

/** A limit: at most `max` job starts per `windowSeconds` (1: per second, 60: per minute). */
export interface RateLimitInput {
  readonly name: string;
  readonly perSecond?: number;
  readonly perMinute?: number;
}

/** A rate limit as the admin views show it. */
export interface RateLimitView {
  readonly name: string;
  readonly perSecond?: number;
  readonly perMinute?: number;
  /** Its jobs queued now. */
  readonly queued: number;
  readonly updatedAt: Date;
}

/** The stored shape of a limit: its name, starts per window and window. */
function limitRow(input: RateLimitInput) {
  checkSegmentId("name", input.name);
  const { perSecond = 0, perMinute = 0 } = input;
  if (perSecond > 0 === perMinute > 0)
    bad(
      `a rate limit takes exactly one of perSecond or perMinute (how many of its jobs may start ` +
        `per window); got perSecond ${perSecond}, perMinute ${perMinute}`,
    );
  const max = perSecond || perMinute;
  if (!(Number.isInteger(max) && max >= 1 && max <= maxStartsPerWindow))
    bad(`a rate limit must be a whole number from 1 to ${maxStartsPerWindow}; got ${max}`);
  return { name: input.name, max_starts: max, window_seconds: perSecond ? 1 : 60 };
}

/**
 * Sets a limit, creating it; every claim from now on, on every replica, holds its jobs to it.
 * Refuses a name that is not an id and anything but one of perSecond or perMinute from 1 to
 * 10,000, storing nothing.
 */
export async function setRateLimit(
  db: Kysely<Database>,
  input: RateLimitInput,
): Promise<RateLimitView> {
  const row = limitRow(input);
  await db
    .insertInto("rate_limits")
    .values(row)
    .onConflict((oc) =>
      oc.column("name").doUpdateSet({
        max_starts: row.max_starts,
        window_seconds: row.window_seconds,
        updated_at: sql<Date>`now()`,
      }),
    )
    .execute();
  const [view] = await listRateLimits(db, input.name);
  return view!;
}

/**
 * Creates each limit not stored yet, leaving a stored one as it is (`serve --rate-limit`): the
 * database stays the one source of truth across restarts and replicas. Returns the names created.
 */
export async function ensureRateLimits(
  db: Kysely<Database>,
  inputs: readonly RateLimitInput[],
): Promise<string[]> {
  if (inputs.length === 0) return [];
  const rows = await db
    .insertInto("rate_limits")
    .values(inputs.map(limitRow))
    .onConflict((oc) => oc.column("name").doNothing())
    .returning("name")
    .execute();
  return rows.map((r) => r.name);
}

/** Refuses (400) a rate limit name that is not stored, before anything of the enqueue is. */
export async function checkRateLimitsExist(
  db: Kysely<Database>,
  names: readonly string[],
): Promise<void> {
  const wanted = [...new Set(names)];
  if (wanted.length === 0) return;
  const stored = await db
    .selectFrom("rate_limits")
    .select("name")
    .where("name", "in", wanted)
    .execute();
  const missing = wanted.find((n) => !stored.some((r) => r.name === n));
  if (missing !== undefined)
    bad(
      `rateLimit ${JSON.stringify(missing)} is not a rate limit: set it first (PUT ` +
        `/v1/admin/rate-limits/${missing}, or serve --rate-limit ${missing}=N/s), or drop it`,
    );
}

/** The rate limits (one when `name` is given), by name, with their queued jobs. */
export async function listRateLimits(
  db: Kysely<Database>,
  name?: string,
): Promise<RateLimitView[]> {
  const rows = await db
    .selectFrom("rate_limits as r")
    .select(["r.name", "r.max_starts", "r.window_seconds", "r.updated_at"])
    .select((eb) =>
      eb
        .selectFrom("jobs as j")
        .select(sql<number>`count(*)::int`.as("n"))
        .whereRef("j.rate_limit", "=", "r.name")
        .where("j.state", "=", "queued")
        .as("queued"),
    )
    .$if(name !== undefined, (qb) => qb.where("r.name", "=", name!))
    .orderBy("r.name")
    .execute();
  return rows.map((r) => ({
    name: r.name,
    ...(r.window_seconds === 1 ? { perSecond: r.max_starts } : { perMinute: r.max_starts }),
    queued: r.queued ?? 0,
    updatedAt: new Date(r.updated_at),
  }));
}

/** Parses and checks `NAME=100/s` or `NAME=100/m` (serve --rate-limit). */
export function parseRateLimitFlag(text: string): RateLimitInput {
  const m = /^([^=]+)=(\d+)\/(s|m)$/.exec(text);
  if (!m)
    bad(`--rate-limit takes NAME=N/s or NAME=N/m (at most N job starts per second or minute)`);
  const n = Number(m[2]);
  const input = m[3] === "s" ? { name: m[1]!, perSecond: n } : { name: m[1]!, perMinute: n };
  limitRow(input);
  return input;
}
