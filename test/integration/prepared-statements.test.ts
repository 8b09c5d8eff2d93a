// Statements that come again go out as named prepared statements (src/store/watched-pool.ts):
// Postgres parses and plans them once per connection instead of on every call. A column added
// under a prepared `select *` (another replica's migration) must not fail the statement: outside
// a transaction it is sent again unnamed, and every text is prepared afresh from then on.
// Postgres only: the embedded database has no pool.
import { sql } from "kysely";
import { describe, expect, it } from "vitest";
import { databaseKind } from "../support/database.js";
import { useTestStore } from "../support/store.js";

describe.runIf(databaseKind === "postgres")("named prepared statements on a Postgres store", () => {
  const store = useTestStore();

  it("prepares a statement on its third call and reuses it with new values", async () => {
    await store()
      .db.connection()
      .execute(async (conn) => {
        const results: number[] = [];
        for (const n of [1, 2, 3, 4, 5]) {
          const { rows } = await sql<{ v: number }>`select ${n}::int + 40 as v`.execute(conn);
          results.push(rows[0]!.v);
        }
        expect(results).toEqual([41, 42, 43, 44, 45]);
        const { rows } = await sql<{
          name: string;
          statement: string;
        }>`select name, statement from pg_prepared_statements`.execute(conn);
        expect(rows.filter((r) => r.statement.includes("::int + 40"))).toEqual([
          { name: expect.stringMatching(/^forelead_\d+$/), statement: "select $1::int + 40 as v" },
        ]);
      });
  });

  it(
    "sends again unnamed a statement Postgres refuses only in its generic " +
      "plan (ON CONFLICT over a partial index)",
    async () => {
      const db = store().db;
      await sql`create table prepared_arbiter (k int not null, state text not null)`.execute(db);
      await sql`create unique index prepared_arbiter_open on prepared_arbiter (k) where state = 'open'`.execute(
        db,
      );
      await db.connection().execute(async (conn) => {
        // Named on its third call; after five custom plans Postgres tries a generic one, which
        // refuses.
        const inserted: number[] = [];
        for (const k of [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 1]) {
          const { rows } = await sql<{
            k: number;
          }>`insert into prepared_arbiter values (${k}, 'open') on conflict (k) where state
          = ${"open"} do nothing returning k`.execute(conn);
          inserted.push(...rows.map((r) => r.k));
        }
        expect(inserted).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
      });
    },
  );

  it("never names a text over 16 KiB (a batch's multi-row insert), however often it comes", async () => {
    const padding = sql.raw(`/* ${"x".repeat(17_000)} */`);
    await store()
      .db.connection()
      .execute(async (conn) => {
        for (const n of [1, 2, 3, 4])
          expect(
            (await sql<{ v: number }>`select ${n}::int + 60 as v ${padding}`.execute(conn)).rows,
          ).toEqual([{ v: n + 60 }]);
        const { rows } = await sql<{
          n: number;
        }>`select count(*)::int as n from pg_prepared_statements where statement like '%::int + 60%'`.execute(
          conn,
        );
        expect(rows[0]!.n).toBe(0);
      });
  });

  it("sends statements inside a transaction unnamed: a stale plan there would abort it", async () => {
    await store()
      .db.transaction()
      .execute(async (tx) => {
        for (const n of [1, 2, 3, 4])
          expect((await sql<{ v: number }>`select ${n}::int + 50 as v`.execute(tx)).rows).toEqual([
            { v: n + 50 },
          ]);
        const { rows } = await sql<{
          n: number;
        }>`select count(*)::int as n from pg_prepared_statements where statement like '%::int + 50%'`.execute(
          tx,
        );
        expect(rows[0]!.n).toBe(0);
      });
  });

  it("answers a prepared select * after a column was added under it, outside a transaction", async () => {
    const db = store().db;
    await sql`create table prepared_probe (id int primary key)`.execute(db);
    await sql`insert into prepared_probe values (1)`.execute(db);
    await db.connection().execute(async (conn) => {
      for (let i = 0; i < 4; i++)
        expect(
          (await sql`select * from prepared_probe where id = ${1}`.execute(conn)).rows,
        ).toEqual([{ id: 1 }]);
      const { rows: prepared } = await sql<{
        n: number;
      }>`select count(*)::int as n from pg_prepared_statements where statement like '%prepared_probe%'`.execute(
        conn,
      );
      expect(prepared[0]!.n).toBe(1);
      // Another connection changes the table, as a migration on another replica would.
      await sql`alter table prepared_probe add column note text default 'added'`.execute(db);
      expect((await sql`select * from prepared_probe where id = ${1}`.execute(conn)).rows).toEqual([
        { id: 1, note: "added" },
      ]);
      // And prepared afresh under a new name from then on.
      for (let i = 0; i < 3; i++)
        await sql`select * from prepared_probe where id = ${1}`.execute(conn);
      const { rows: after } = await sql<{
        name: string;
      }>`select name from pg_prepared_statements where statement like '%from prepared_probe where%'
        order by prepare_time`.execute(conn);
      expect(after).toHaveLength(2);
      expect(after[0]!.name).not.toBe(after[1]!.name);
    });
  });
});
