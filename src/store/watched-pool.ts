import type { PostgresPool, PostgresPoolClient } from "kysely";
import type pg from "pg";
import type { DatabaseHealth } from "./health.js";
import { DatabasePoolBusyError, isConnectTimeout } from "./unreachable.js";

/**
 * `pool` as kysely's PostgresDialect takes it, with every connect and query
 * reported to `health`: a failure that says the database is unreachable marks
 * it down, a query that succeeds marks it up again. Also keeps a connection
 * that dies while checked out (between two statements of a transaction) from
 * crashing the process with an unhandled 'error' event; pg.Pool then drops it
 * at release and opens a new one for the next caller.
 *
 * A statement whose text comes again is sent as a named prepared statement
 * (statementNames below): Postgres parses it once per connection and, for
 * most of ours, keeps one generic plan, where an unnamed statement is
 * parsed and planned on every call. Planning had been a third of Postgres'
 * time under a steady pickup load (docs/performance.md). Statements inside a
 * transaction go unnamed: there a plan made stale by a migration on another
 * replica would abort the transaction instead of being sent again.
 */
export function watchedPool(pool: pg.Pool, health: DatabaseHealth): PostgresPool {
  pool.on("error", (err) => {
    if (!health.failed("a pooled connection", err))
      console.error(`database: an idle pooled connection failed: ${err.message}`);
  });
  pool.on("connect", (client) => {
    // Idle, the pool's listener also sees the error (above); in use, its next query fails and is
    // reported as well.
    client.on("error", (err) => void health.failed("a pooled connection", err));
  });
  const names = statementNames();
  // One wrapper per pg client: kysely keeps its connection object per client it is handed.
  const wrappers = new WeakMap<pg.PoolClient, PostgresPoolClient>();
  const wrap = (client: pg.PoolClient): PostgresPoolClient => {
    let inTransaction = false;
    // pg clones a config object (utils.js cloneQueryConfig, ~1 % of the main thread): only a named
    // statement needs one.
    const send = (text: string, values: unknown[] | undefined, name: string | undefined) =>
      name ? client.query({ name, text, values }) : client.query(text, values);
    const query = (text: unknown, parameters?: ReadonlyArray<unknown>): unknown => {
      if (typeof text !== "string") return client.query(text as pg.Submittable);
      if (transactionControl.test(text)) inTransaction = !/^(commit|rollback)$/i.test(text);
      const startedAt = performance.now();
      const values = parameters as unknown[] | undefined;
      // Only outside a transaction, where a stale plan can be answered by sending the text again.
      const name = inTransaction ? undefined : names.nameFor(text);
      return send(text, values, name)
        .catch((err: unknown) => {
          // Never inside a transaction (above), so sending the text again is safe.
          if (!name) throw err;
          if (isStalePlan(err))
            // a column added since it was prepared (another replica's migration): prepare afresh
            names.forgetAll();
          else if (isGenericPlanRefusal(err))
            names.never(text); // e.g. ON CONFLICT ... WHERE state = $1 over a partial index
          else throw err;
          return send(text, values, undefined);
        })
        .then(
          (result) => {
            health.succeeded(startedAt);
            return result;
          },
          (err: unknown) => {
            health.failed("a query", err);
            throw err;
          },
        );
    };
    return {
      query: query as PostgresPoolClient["query"],
      release: (destroy) => client.release(destroy),
    };
  };
  return {
    async connect() {
      let client: pg.PoolClient;
      try {
        client = await pool.connect();
      } catch (err) {
        // All checked out for the whole wait (pg-pool says it as for a server it cannot reach).
        if (pool.totalCount >= (pool.options.max ?? 10) && isConnectTimeout(err)) {
          throw new DatabasePoolBusyError(
            pool.options.max ?? 10,
            pool.options.connectionTimeoutMillis ?? 0,
          );
        }
        health.failed("opening a connection", err);
        throw err;
      }
      let wrapper = wrappers.get(client);
      if (!wrapper) wrappers.set(client, (wrapper = wrap(client)));
      return wrapper;
    },
    end: () => pool.end(),
  };
}

/** kysely's own transaction statements (postgres-driver.js): begin, commit, rollback. */
const transactionControl = /^(begin|commit|rollback)$/i;

/**
 * Postgres refusing a statement only in its generic plan: an ON CONFLICT whose
 * WHERE takes a parameter cannot be matched to a partial unique index there
 * (42P10), while the same text unnamed, planned with its values, can.
 */
function isGenericPlanRefusal(err: unknown): boolean {
  return (err as { code?: unknown }).code === "42P10";
}

/** Postgres refusing a prepared statement whose result columns changed under it. */
function isStalePlan(err: unknown): boolean {
  return (
    (err as { code?: unknown }).code === "0A000" &&
    /cached plan must not change result type/.test(String((err as Error).message))
  );
}

/**
 * Which statement texts go out named, and under what name. A text gets a
 * name on its third call, so statements built with their values inline, or
 * sized by a batch, seldom do; at most `limit` names in all, as each is a
 * parsed statement and a plan on every connection that runs it. A text over
 * `maxLength` is never counted or named: a batch's multi-row insert can be
 * hundreds of kilobytes, and remembering a few hundred of them would hold
 * that much memory for nothing (the hot statements are 1–4 KB).
 */
function statementNames(limit = 200, maxLength = 16_384) {
  const seen = new Map<string, number>();
  const named = new Map<string, string>();
  /** Texts that failed named and work unnamed (isGenericPlanRefusal); bounded like `named`. */
  const unnamed = new Set<string>();
  let next = 1;
  return {
    nameFor(text: string): string | undefined {
      if (text.length > maxLength || unnamed.has(text)) return undefined;
      const name = named.get(text);
      if (name || named.size >= limit) return name;
      const calls = (seen.get(text) ?? 0) + 1;
      if (calls < 3) {
        if (seen.size >= 500) seen.clear();
        seen.set(text, calls);
        return undefined;
      }
      seen.delete(text);
      const fresh = `forelead_${next++}`;
      named.set(text, fresh);
      return fresh;
    },
    /** `text` goes out unnamed from now on. */
    never(text: string): void {
      named.delete(text);
      if (unnamed.size < limit) unnamed.add(text);
    },
    /**
     * Every text is prepared again under a new name from now on (the old ones stay unused on their
     * connections).
     */
    forgetAll(): void {
      named.clear();
    },
  };
}
