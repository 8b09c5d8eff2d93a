// The SQL functions' source files (src/store/sql/functions/NAME.sql) and the frozen copies of them
// that migrations carry. Used by scripts/new-migration.ts and the tests that hold the two together
// (test/integration/store-functions.test.ts); migrations never read these files when they run.
import { readdirSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import type { Migration } from "kysely";

/** The folder of the functions' source files, one `create or replace function` a file. */
export const functionSourcesDir = fileURLToPath(
  new URL("../src/store/sql/functions/", import.meta.url),
);

/**
 * The statement of a source file: the file without its leading comment, which documents the
 * function and may change without a migration. Everything from `create` on is the definition.
 */
export function functionStatement(fileText: string): string {
  const lines = fileText.split("\n");
  let first = 0;
  while (first < lines.length && /^\s*(--.*)?$/.test(lines[first]!)) first++;
  return lines.slice(first).join("\n").trimEnd() + "\n";
}

/** Every source file's statement, by function name (the file's name). */
export function readFunctionSources(): Map<string, string> {
  return new Map(
    readdirSync(functionSourcesDir)
      .filter((f) => f.endsWith(".sql"))
      .sort()
      .map((f) => [
        f.slice(0, -".sql".length),
        functionStatement(readFileSync(functionSourcesDir + f, "utf8")),
      ]),
  );
}

/** A migration that carries frozen copies of function statements (written by new-migration.ts). */
interface MigrationWithFunctions extends Migration {
  readonly functions?: Readonly<Record<string, string>>;
}

/** The frozen copy of each function in the latest migration that carries one, by function name. */
export function latestFrozenCopies(
  migrations: Readonly<Record<string, Migration>>,
): Map<string, { readonly migration: string; readonly statement: string }> {
  const latest = new Map<string, { migration: string; statement: string }>();
  for (const [migration, module] of Object.entries(migrations))
    for (const [name, statement] of Object.entries(
      (module as MigrationWithFunctions).functions ?? {},
    ))
      latest.set(name, { migration, statement });
  return latest;
}

/**
 * A function's definition (pg_get_functiondef) with each line's surrounding whitespace and the
 * blank lines dropped: the sources indent their bodies as a file reads best, the migrations before
 * them as their TypeScript did, and Postgres keeps a body's text as given.
 */
export function normalizeDefinition(definition: string): string {
  return definition
    .split("\n")
    .map((line) => line.trim())
    .filter((line) => line !== "")
    .join("\n");
}
