// A statement compiled once per shape and sent again with each call's values
// (src/store/statement-shapes.ts), on the embedded database and on Postgres.
import { sql, type Kysely } from "kysely";
import { describe, expect, it } from "vitest";
import { statementShapes } from "../../src/store/statement-shapes.js";
import { useTestStore } from "../support/store.js";

interface Probe {
  shapes_probe: { id: number; note: string | undefined; at: unknown };
}

interface Row extends Record<string, unknown> {
  readonly id: number;
  readonly note?: string | undefined;
  readonly at?: unknown;
}

describe("statementShapes", () => {
  const store = useTestStore();
  const db = () => store().db as unknown as Kysely<Probe>;

  it("builds each shape once and answers every call with its own values", async () => {
    await sql`create table shapes_probe (id int primary key, note text not null default 'none', at
      timestamptz not null default 'epoch')`.execute(db());
    const builds: string[] = [];
    const suffix = { text: "!" };
    const insert = statementShapes(
      (q: Kysely<Probe>, row: Row, context: { text: string } | undefined) => {
        builds.push(Object.keys(row).join(","));
        return q
          .insertInto("shapes_probe")
          .values(row)
          .returning((eb) => [
            eb.ref("id").as("id"),
            sql<string>`note || ${context?.text ?? ""}`.as("note"),
          ]);
      },
    );
    const run = async (row: Row, context?: { text: string }) =>
      (await insert.execute(db(), row, context)).rows;

    expect(await run({ id: 1, note: "a" })).toEqual([{ id: 1, note: "a" }]);
    expect(await run({ id: 2, note: "b" })).toEqual([{ id: 2, note: "b" }]);
    expect(builds).toEqual(["id,note"]);
    // An undefined value is left out, as kysely leaves it out of an insert: the column's default.
    expect(await run({ id: 3, note: undefined })).toEqual([{ id: 3, note: "none" }]);
    expect(await run({ id: 4 })).toEqual([{ id: 4, note: "none" }]);
    expect(builds).toEqual(["id,note", "id"]);
    // The context is part of the shape.
    expect(await run({ id: 5, note: "c" }, suffix)).toEqual([{ id: 5, note: "c!" }]);
    expect(await run({ id: 6, note: "d" }, suffix)).toEqual([{ id: 6, note: "d!" }]);
    expect(builds).toEqual(["id,note", "id", "id,note"]);
    // A value that is an expression is built with the call, every time, and not kept.
    const at = sql`'2026-01-02T00:00:00Z'::timestamptz + make_interval(secs => ${60})`;
    expect(await run({ id: 7, note: "e", at })).toEqual([{ id: 7, note: "e" }]);
    expect(await run({ id: 8, note: "f", at })).toEqual([{ id: 8, note: "f" }]);
    expect(builds.slice(3)).toEqual(["id,note,at", "id,note,at"]);
    const { rows } = await sql<{
      id: number;
      at: Date;
    }>`select id, at from shapes_probe where id in (7, 8) order by id`.execute(db());
    expect(rows.map((r) => new Date(r.at).toISOString())).toEqual([
      "2026-01-02T00:01:00.000Z",
      "2026-01-02T00:01:00.000Z",
    ]);
    // A database with plugins sees every statement compiled through them (bench/lib/plans.ts
    // captures so).
    const seen: string[] = [];
    const watched = db().withPlugin({
      transformQuery: (args) => (seen.push(args.node.kind), args.node),
      transformResult: async (args) => args.result,
    });
    expect((await insert.execute(watched, { id: 9, note: "g" }, undefined)).rows).toEqual([
      { id: 9, note: "g" },
    ]);
    expect((await insert.execute(watched, { id: 10, note: "h" }, undefined)).rows).toEqual([
      { id: 10, note: "h" },
    ]);
    expect(seen).toEqual(["InsertQueryNode", "InsertQueryNode"]);
    const all = await sql<{
      id: number;
      note: string;
    }>`select id, note from shapes_probe order by id`.execute(db());
    expect(all.rows.map((r) => `${r.id}:${r.note}`)).toEqual([
      "1:a",
      "2:b",
      "3:none",
      "4:none",
      "5:c",
      "6:d",
      "7:e",
      "8:f",
      "9:g",
      "10:h",
    ]);
  });
});
