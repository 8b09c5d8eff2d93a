import { CompiledQuery, type Kysely, type KyselyPlugin } from "kysely";
import type { Database } from "../../src/store/schema.js";

/**
 * Runs `action` against a view of `db` that stops at the first statement
 * matching `pattern` and returns it compiled (SQL text and parameters),
 * unexecuted: `action`'s transaction is rolled back. The benchmark explains
 * the statements the code really sends, not a copy that could drift.
 */
export async function captureStatement(db: Kysely<Database>, pattern: RegExp, action: (db: Kysely<Database>) => Promise<unknown>): Promise<CompiledQuery> {
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

/** EXPLAIN (ANALYZE, BUFFERS) of `query` in a transaction that is rolled back: the plan and its timing, nothing kept. */
export async function explainAnalyze(db: Kysely<Database>, query: CompiledQuery): Promise<string> {
  let plan = "";
  const rollback = new Error("rollback");
  try {
    await db.transaction().execute(async (tx) => {
      const { rows } = await tx.executeQuery<Record<string, string>>(CompiledQuery.raw(`explain (analyze, buffers) ${query.sql}`, [...query.parameters]));
      plan = rows.map((r) => Object.values(r)[0]).join("\n");
      throw rollback;
    });
  } catch (err) {
    if (err !== rollback) throw err;
  }
  return plan;
}
