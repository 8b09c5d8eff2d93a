import { sql, type RawBuilder } from "kysely";
import { liveLeaseRow } from "../leases/sql-fragments.js";

/** A runner's state: forelead_runner_state's values, in its order of precedence. */
export const runnerStates = ["retired", "offline", "draining", "paused", "busy", "idle"] as const;

/** One of runnerStates. */
export type RunnerState = (typeof runnerStates)[number];

/**
 * A runner not heard from (register, claim, renew, inventory) for this long is offline: 90 s by
 * default, nine of a busy runner's renewals at the default 30 s lease (it renews every third of its
 * lease) and four of an idle runner's claim long polls (at most 20 s); the lease length when that
 * is longer. `serve --runner-offline-seconds` sets it; it must be at least the lease length.
 */
export const defaultRunnerOfflineSeconds = 90;

/**
 * The state of the runners row `alias` (forelead_runner_state), given its live lease count as a SQL
 * expression: the one definition every view of runners reads.
 */
export function runnerState(
  alias: string,
  liveLeases: RawBuilder<number>,
  offlineSeconds: number,
): RawBuilder<RunnerState> {
  const c = (column: string) => sql.ref(`${alias}.${column}`);
  return sql<RunnerState>`forelead_runner_state(${c("retired_at")}, ${c("last_seen_at")},
    ${c("draining_at")}, ${c("paused_at")}, ${liveLeases}, ${offlineSeconds}::int)`;
}

/** The live leases (liveLeaseRow) of the runners row `alias`, as a SQL expression. */
export function liveLeaseCount(alias: string): RawBuilder<number> {
  const c = (column: string) => sql.ref(`${alias}.${column}`);
  return sql<number>`(select count(*)::int from leases l where l.workspace_id = ${c("workspace_id")}
    and l.runner_id = ${c("runner_id")} and ${liveLeaseRow("l")})`;
}
