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
 */
export function watchedPool(pool: pg.Pool, health: DatabaseHealth): PostgresPool {
  pool.on("error", (err) => {
    if (!health.failed("a pooled connection", err)) console.error(`database: an idle pooled connection failed: ${err.message}`);
  });
  pool.on("connect", (client) => {
    // Idle, the pool's listener also sees the error (above); in use, its next query fails and is reported as well.
    client.on("error", (err) => void health.failed("a pooled connection", err));
  });
  // One wrapper per pg client: kysely keeps its connection object per client it is handed.
  const wrappers = new WeakMap<pg.PoolClient, PostgresPoolClient>();
  const wrap = (client: pg.PoolClient): PostgresPoolClient => {
    const query = (text: unknown, parameters?: ReadonlyArray<unknown>): unknown => {
      if (typeof text !== "string") return client.query(text as pg.Submittable);
      const startedAt = performance.now();
      return client.query(text, parameters as unknown[]).then(
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
    return { query: query as PostgresPoolClient["query"], release: (destroy) => client.release(destroy) };
  };
  return {
    async connect() {
      let client: pg.PoolClient;
      try {
        client = await pool.connect();
      } catch (err) {
        // All checked out for the whole wait (pg-pool says it as for a server it cannot reach).
        if (pool.totalCount >= (pool.options.max ?? 10) && isConnectTimeout(err)) {
          throw new DatabasePoolBusyError(pool.options.max ?? 10, pool.options.connectionTimeoutMillis ?? 0);
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
