// The SQL functions have one source each (src/store/sql/functions/NAME.sql), and the migrated
// database defines exactly those: the migrations' history and the sources never drift apart.
import { sql, type Kysely } from "kysely";
import { describe, expect, it } from "vitest";
import { migrations } from "../../src/store/migrations/index.js";
import type { Database } from "../../src/store/schema.js";
import {
  latestFrozenCopies,
  normalizeDefinition,
  readFunctionSources,
} from "../../scripts/sql-functions.js";
import { databaseKind } from "../support/database.js";
import { useTestStore } from "../support/store.js";

const store = useTestStore();

/** Every function of the public schema: its signature and its normalized definition. */
async function definitions(db: Kysely<Database>): Promise<Map<string, string>> {
  const { rows } = await sql<{ name: string; signature: string; definition: string }>`
    select p.proname as name, p.oid::regprocedure::text as signature,
      pg_get_functiondef(p.oid) as definition
    from pg_proc p join pg_namespace n on n.oid = p.pronamespace
    where n.nspname = 'public'
    order by 2`.execute(db);
  return new Map(rows.map((r) => [r.signature, normalizeDefinition(r.definition)]));
}

describe(`SQL function sources (${databaseKind})`, () => {
  it("the migrated database has a function for each source file and none without one", async () => {
    const { rows } = await sql<{ name: string }>`
      select distinct p.proname as name from pg_proc p
      join pg_namespace n on n.oid = p.pronamespace where n.nspname = 'public'
      order by 1`.execute(store().db);
    expect(rows.map((r) => r.name)).toEqual([...readFunctionSources().keys()]);
  });

  it("each source file defines its function exactly as the migrations left it", async () => {
    const db = store().db;
    const migrated = await definitions(db);
    const sourced = await db
      .transaction()
      .execute(async (trx) => {
        // A create or replace of each source over the migrated database: a source that differs in
        // anything but whitespace (body, settings, volatility) changes a definition, one with
        // another signature adds a function.
        for (const statement of readFunctionSources().values())
          await sql.raw(statement).execute(trx);
        throw new Rollback(await definitions(trx));
      })
      .catch((err: unknown) => {
        if (err instanceof Rollback) return err.definitions;
        throw err;
      });
    expect(Object.fromEntries(sourced)).toEqual(Object.fromEntries(migrated));
  });

  it("a function's latest frozen copy in a migration is its source file", () => {
    const sources = readFunctionSources();
    for (const [name, { migration, statement }] of latestFrozenCopies(migrations))
      expect(
        sources.get(name),
        `src/store/sql/functions/${name}.sql differs from its copy in migration ${migration}: ` +
          `write a new one (npm run migration:new -- NAME ${name})`,
      ).toBe(statement);
  });
});

/** Rolls the transaction back, carrying what it read. */
class Rollback extends Error {
  constructor(readonly definitions: Map<string, string>) {
    super("rollback");
  }
}
