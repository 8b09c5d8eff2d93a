import {
  CompiledQuery,
  type Compilable,
  type Kysely,
  type QueryResult,
  type RawBuilder,
} from "kysely";

/** Stands for the value of `name` while a statement's shape is compiled. */
class Slot {
  constructor(readonly name: string) {}
}

interface Shape {
  readonly sql: string;
  /** Per parameter: the slot of the value it takes, or the constant the build gave it. */
  readonly parameters: readonly unknown[];
}

/**
 * A statement that kysely builds and compiles once per shape, then sends
 * again with each call's values. Building and compiling a statement with
 * CTEs took ~1 ms of the main thread per enqueue (docs/performance.md),
 * more than Postgres took to run it.
 *
 * A shape is the names of the values given (those not undefined: kysely
 * leaves an undefined column out of an insert, so the shape does too) and
 * `context`, compared by identity (an object, or undefined). `build` gets a
 * stand-in for each value under its name and must use them only as values
 * (kysely turns each into a parameter), never look at them or branch on
 * them; anything else it puts in the statement may come only from `context`.
 * A call whose values include an expression (a kysely `sql` fragment), or
 * on a database with kysely plugins (they transform a statement as it is
 * compiled; bench/lib/plans.ts captures statements that way), is built as
 * it comes, every time, and not kept.
 */
export function statementShapes<
  DB,
  V extends Record<string, unknown>,
  C extends object | undefined,
  R,
>(build: (db: Kysely<DB>, values: V, context: C) => Compilable<R> | RawBuilder<R>) {
  // Per dialect adapter (the text is the dialect's), then per context, then per names.
  const shapes = new WeakMap<object, WeakMap<object, Map<string, Shape>>>();
  const noContext = {};
  const shapesOf = (db: Kysely<DB>, context: C): Map<string, Shape> => {
    const adapter = db.getExecutor().adapter;
    let byContext = shapes.get(adapter);
    if (!byContext) shapes.set(adapter, (byContext = new WeakMap()));
    const contextKey = context ?? noContext;
    let byNames = byContext.get(contextKey);
    if (!byNames) byContext.set(contextKey, (byNames = new Map()));
    return byNames;
  };
  return {
    /** Runs the statement of this shape with `values`. */
    async execute(db: Kysely<DB>, values: V, context: C): Promise<QueryResult<R>> {
      const names = Object.keys(values).filter((name) => values[name] !== undefined);
      // Plugins transform a statement as it is compiled, so a database with any gets it built every
      // call too.
      if (db.getExecutor().plugins.length > 0 || names.some((name) => isExpression(values[name])))
        return db.executeQuery<R>(compile(db, build(db, values, context)));
      const byNames = shapesOf(db, context);
      const key = names.join(",");
      let shape = byNames.get(key);
      if (!shape) {
        const stand = Object.fromEntries(
          names.map((name) => [name, new Slot(name)]),
        ) as unknown as V;
        const compiled = compile(db, build(db, stand, context));
        byNames.set(key, (shape = { sql: compiled.sql, parameters: compiled.parameters }));
      }
      const parameters = shape.parameters.map((p) => (p instanceof Slot ? values[p.name] : p));
      return db.executeQuery<R>(CompiledQuery.raw(shape.sql, parameters));
    },
  };
}

function isExpression(value: unknown): boolean {
  return (
    typeof value === "object" &&
    value !== null &&
    typeof (value as { toOperationNode?: unknown }).toOperationNode === "function"
  );
}

/** A builder compiles by itself; a `sql` fragment with the database it will run on. */
function compile<DB, R>(
  db: Kysely<DB>,
  statement: Compilable<R> | RawBuilder<R>,
): CompiledQuery<R> {
  return (statement as RawBuilder<R>).isRawBuilder === true
    ? (statement as RawBuilder<R>).compile(db)
    : (statement as Compilable<R>).compile();
}
