// src/store/schema.ts (the kysely Database types, written by hand) says what the migrations made:
// the same tables, the same columns, null where a column is nullable, a value of the column's kind,
// and an optional insert only where the database supplies a value.
import { fileURLToPath } from "node:url";
import { sql } from "kysely";
import ts from "typescript";
import { describe, expect, it } from "vitest";
import { databaseKind } from "../support/database.js";
import { useTestStore } from "../support/store.js";

const store = useTestStore();

/** How a column reads, in kinds both sides can name. */
type Kind = "string" | "number" | "boolean" | "Date" | "bytes" | "array" | "json";

interface Column {
  /** "unknown": declared `unknown`, which admits null and anything else. */
  readonly nullable: boolean | "unknown";
  /** Whether an insert may leave it out (TypeScript), or whether the database then supplies it. */
  readonly optionalInsert: boolean;
  readonly kind: Kind;
}

type Tables = Record<string, Record<string, Column>>;

/** The Database interface of src/store/schema.ts, read with the TypeScript type checker. */
function declaredTables(): Tables {
  const file = fileURLToPath(new URL("../../src/store/schema.ts", import.meta.url));
  const program = ts.createProgram([file], {
    strict: true,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    target: ts.ScriptTarget.ES2022,
    types: ["node"],
    noEmit: true,
  });
  const checker = program.getTypeChecker();
  const source = program.getSourceFile(file)!;
  const database = checker
    .getExportsOfModule(checker.getSymbolAtLocation(source)!)
    .find((s) => s.name === "Database")!;
  const tables: Tables = {};
  for (const table of checker.getPropertiesOfType(checker.getDeclaredTypeOfSymbol(database))) {
    const tableType = checker.getTypeOfSymbol(table);
    tables[table.name] = Object.fromEntries(
      checker.getPropertiesOfType(tableType).map((column) => {
        const type = checker.getTypeOfSymbol(column);
        // kysely's ColumnType<Select, Insert, Update> is { __select__, __insert__, __update__ }.
        const part = (name: string) => {
          const p = type.getProperty(name);
          return p ? checker.getTypeOfSymbol(p) : undefined;
        };
        const select = part("__select__") ?? type;
        const insert = part("__insert__") ?? type;
        const members = (t: ts.Type) => (t.isUnion() ? t.types : [t]);
        const has = (t: ts.Type, flag: ts.TypeFlags) => members(t).some((m) => m.flags & flag);
        return [
          column.name,
          {
            nullable: has(select, ts.TypeFlags.Unknown | ts.TypeFlags.Any)
              ? "unknown"
              : has(select, ts.TypeFlags.Null),
            optionalInsert: has(insert, ts.TypeFlags.Undefined) || has(insert, ts.TypeFlags.Never),
            kind: kindOf(
              checker,
              members(select).filter((m) => !(m.flags & ts.TypeFlags.Null)),
            ),
          },
        ];
      }),
    );
  }
  return tables;
}

function kindOf(checker: ts.TypeChecker, types: readonly ts.Type[]): Kind {
  const kinds = new Set(
    types.map((t): Kind => {
      if (t.flags & (ts.TypeFlags.StringLike | ts.TypeFlags.StringLiteral)) return "string";
      if (t.flags & (ts.TypeFlags.NumberLike | ts.TypeFlags.NumberLiteral)) return "number";
      if (t.flags & ts.TypeFlags.BooleanLike) return "boolean";
      if (checker.isArrayType(t)) return "array";
      const name = t.getSymbol()?.name;
      if (name === "Date") return "Date";
      if (name === "Buffer" || name === "Uint8Array") return "bytes";
      return "json";
    }),
  );
  return kinds.size === 1 ? [...kinds][0]! : "json";
}

/** The kind of a Postgres column as pg and PGlite read it (int8 as a number: see database.ts). */
function kindOfColumn(dataType: string, udt: string): Kind {
  if (dataType === "ARRAY") return "array";
  if (udt === "json" || udt === "jsonb") return "json";
  if (udt === "bool") return "boolean";
  if (udt === "bytea") return "bytes";
  if (udt === "timestamptz" || udt === "timestamp") return "Date";
  if (["int2", "int4", "int8", "float4", "float8", "numeric"].includes(udt)) return "number";
  return "string";
}

describe(`store/schema.ts against the migrated database (${databaseKind})`, () => {
  it(
    "declares every table and column the migrations made, with their " +
      "nullability and kind, and an optional insert only where the database " +
      "supplies a value",
    async () => {
      const { rows } = await sql<{
        table_name: string;
        column_name: string;
        is_nullable: "YES" | "NO";
        data_type: string;
        udt_name: string;
        supplied: boolean;
      }>`
      select c.table_name, c.column_name, c.is_nullable, c.data_type, c.udt_name,
        (c.column_default is not null or c.is_identity = 'YES' or c.is_generated = 'ALWAYS') as supplied
      from information_schema.columns c
      join information_schema.tables t on t.table_schema = c.table_schema and t.table_name = c.table_name
      where c.table_schema = 'public' and t.table_type = 'BASE TABLE'
        and c.table_name not like 'kysely_migration%'
      order by c.table_name, c.ordinal_position`.execute(store().db);
      const migrated: Tables = {};
      for (const r of rows)
        (migrated[r.table_name] ??= {})[r.column_name] = {
          nullable: r.is_nullable === "YES",
          optionalInsert: r.supplied || r.is_nullable === "YES",
          kind: kindOfColumn(r.data_type, r.udt_name),
        };
      const declared = declaredTables();
      // What schema.ts may say more loosely: any value (`unknown`) for a json column, and a required
      // insert of a column the database could supply (the code always gives it).
      for (const [table, columns] of Object.entries(declared))
        for (const [column, d] of Object.entries(columns)) {
          const m = migrated[table]?.[column];
          if (!m) continue;
          columns[column] = {
            ...d,
            kind: m.kind === "json" ? "json" : d.kind,
            nullable: d.nullable === "unknown" && m.kind === "json" ? m.nullable : d.nullable,
            optionalInsert: d.optionalInsert || !m.optionalInsert ? d.optionalInsert : true,
          };
        }
      expect(sorted(declared)).toEqual(sorted(migrated));
    },
    60_000,
  );
});

function sorted(tables: Tables): Tables {
  return Object.fromEntries(
    Object.keys(tables)
      .sort()
      .map((t) => [
        t,
        Object.fromEntries(
          Object.keys(tables[t]!)
            .sort()
            .map((c) => [c, tables[t]![c]!]),
        ),
      ]),
  );
}
