// Writes a new migration, src/store/migrations/NNNN_NAME.ts, registered in index.ts. With function
// names, it carries a frozen copy of each one's source file (src/store/sql/functions/FUNCTION.sql)
// as it is now, and its `up` runs them in the order given: a changed function is a changed source
// file plus this migration. The copies are never edited; a later change is a later migration.
// test/integration/store-functions.test.ts fails while a source file differs from its latest copy.
//
//   npm run migration:new -- NAME [FUNCTION ...]
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { format, resolveConfig } from "prettier";
import { readFunctionSources } from "./sql-functions.js";

const migrationsDir = fileURLToPath(new URL("../src/store/migrations/", import.meta.url));

const [name, ...functionNames] = process.argv.slice(2);
if (!name || !/^[a-z0-9]+(_[a-z0-9]+)*$/.test(name)) {
  console.error("usage: npm run migration:new -- NAME [FUNCTION ...]  (NAME: lower_snake_case)");
  process.exit(2);
}
const sources = readFunctionSources();
for (const f of functionNames)
  if (!sources.has(f)) {
    console.error(`no source file src/store/sql/functions/${f}.sql`);
    process.exit(2);
  }

const numbers = readdirSync(migrationsDir)
  .map((f) => /^(\d{4})_.*\.ts$/.exec(f)?.[1])
  .filter((n): n is string => n !== undefined)
  .map(Number);
const id = `${String(Math.max(0, ...numbers) + 1).padStart(4, "0")}_${name}`;

/** A template literal holding `text` as it is. */
const literal = (text: string) =>
  "`" + text.replace(/\\/g, "\\\\").replace(/`/g, "\\`").replace(/\$\{/g, "\\${") + "`";

const copies = functionNames.map((f) => `  ${f}: ${literal(sources.get(f)!)},`).join("\n");
const body = `import { sql, type Kysely } from "kysely";

/**
 * TODO: what this migration changes and why (the rule and the guarantee, not the history).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  for (const statement of Object.values(functions)) await sql.raw(statement).execute(db);
}

/**
 * Frozen copies of the functions' source files (src/store/sql/functions) as they are at this
 * migration, written by \`npm run migration:new\`: never edited.
 */
export const functions: Readonly<Record<string, string>> = {
${copies}
};
`;

const file = `${migrationsDir}${id}.ts`;
const prettierOptions = (await resolveConfig(file)) ?? {};
writeFileSync(file, await format(body, { ...prettierOptions, filepath: file }));

const indexFile = `${migrationsDir}index.ts`;
const index = readFileSync(indexFile, "utf8");
const alias = `m${id.slice(0, 4)}`;
const withImport = index.replace(
  /(import \* as m\d{4} from "\.\/[^"]+";\n)(?!import \* as m)/,
  `$1import * as ${alias} from "./${id}.js";\n`,
);
const withEntry = withImport.replace(
  /(\n {2}"\d{4}_[a-z0-9_]+": m\d{4},\n)(\};)/,
  `$1  "${id}": ${alias},\n$2`,
);
if (withEntry === withImport || withImport === index)
  throw new Error(`could not register ${id} in ${indexFile}: add it by hand`);
writeFileSync(indexFile, withEntry);
console.log(`wrote ${file}${functionNames.length ? ` (${functionNames.join(", ")})` : ""}`);
console.log(`registered it in ${indexFile}; describe it in its comment, then npm run schema`);
