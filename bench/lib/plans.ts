import type { CompiledQuery, Kysely, KyselyPlugin } from "kysely";
import pg from "pg";
import type { Database } from "../../src/store/schema.js";

/**
 * Runs `action` against a view of `db` that stops at the first statement
 * matching `pattern` and returns it compiled (SQL text and parameters),
 * unexecuted: `action`'s transaction is rolled back. The benchmark explains
 * the statements the code really sends, not a copy that could drift.
 */
export async function captureStatement(
  db: Kysely<Database>,
  pattern: RegExp,
  action: (db: Kysely<Database>) => Promise<unknown>,
): Promise<CompiledQuery> {
  const stop = new Error("captured");
  let captured: CompiledQuery | undefined;
  const recorder: KyselyPlugin = {
    transformQuery: (args) => {
      const compiled = spy.getExecutor().compileQuery(args.node, args.queryId);
      if (!captured && pattern.test(compiled.sql)) {
        captured = compiled;
        throw stop;
      }
      return args.node;
    },
    transformResult: async (args) => args.result,
  };
  const spy = db.withPlugin(recorder);
  try {
    await action(spy);
  } catch (err) {
    if (err !== stop) throw err;
  }
  if (!captured) throw new Error(`no statement matching ${pattern} was sent`);
  return captured;
}

/**
 * The plans Postgres runs for `query` and every statement nested in it (the
 * claim is a PL/pgSQL function: EXPLAIN of the call shows only a function
 * scan). auto_explain logs each plan with ANALYZE and BUFFERS as a NOTICE to
 * this client; the call runs in a transaction that is rolled back, nothing
 * kept. Needs a Postgres server with auto_explain (contrib) and a superuser
 * connection, as the benchmark's is; undefined on the embedded database.
 */
export async function explainNested(
  databaseUrl: string | undefined,
  query: CompiledQuery,
): Promise<string[] | undefined> {
  if (!databaseUrl?.startsWith("postgres")) return undefined;
  const client = new pg.Client({ connectionString: databaseUrl });
  const plans: string[] = [];
  client.on("notice", (n) => {
    if (/Query Text:/.test(n.message ?? "")) plans.push(n.message!);
  });
  await client.connect();
  try {
    await client.query("LOAD 'auto_explain'");
    for (const setting of [
      "log_min_duration = 0",
      "log_analyze = on",
      "log_buffers = on",
      "log_nested_statements = on",
      "log_level = notice",
    ])
      await client.query(`SET auto_explain.${setting}`);
    await client.query("BEGIN");
    await client.query(query.sql, [...query.parameters]);
    await client.query("ROLLBACK");
  } finally {
    await client.end();
  }
  return plans;
}
