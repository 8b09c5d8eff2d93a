// What Postgres's backend spends on one stored 100 B log line, by the form of the statement and the
// type of the data column: one connection, one statement at a time, batches of 500 lines, the
// backend's CPU read from /proc (so run it on the machine that runs Postgres). docs/performance.md,
// section 3, "Postgres's share of a stored line". Forms, in a scratch table shaped like
// stream_messages:
//   nested  — the batches as one jsonb parameter of [[sequence, data], …] arrays, the shape
//             appendBatches sent before (jsonb_array_elements twice, ->> 0 and -> 1 per line);
//   ranged  — the data as one jsonb array and the sequences as a bigint[] beside it, each line read
//             by its place (array[n], jsonb -> n - 1): what appendBatches sends since, a batch
//             reading its own range of places;
//   zipped  — the same two parameters read together by ROWS FROM;
//   json / text — the zipped form into a column of type json or text instead of jsonb (the text
//             sent is kept as is; jsonb parses it into its binary form).
// Not part of `npm run bench`. Run: DATABASE_URL=postgres://… node --import tsx
// bench/micro/pg-line-cost.ts [--rounds 3] [--statements 300]
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import pg from "pg";
import { parseOptions } from "../lib/options.js";

const options = parseOptions(process.argv.slice(2), { rounds: "string", statements: "string" });
const rounds = Number(options.flags["rounds"] ?? 3);
const statements = Number(options.flags["statements"] ?? 300);
const linesPerStatement = 500;
const url = process.env["DATABASE_URL"];
if (!url)
  throw new Error(
    "set DATABASE_URL to a Postgres server on this machine (a scratch table is created and dropped there)",
  );

/** The CPU time (user + system) of process `pid` so far, in ms (10 ms ticks). */
function cpuMsOf(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(f[11]) + Number(f[12])) * 10;
}

const data = JSON.stringify({ stream: "stdout", text: "x".repeat(100) });
const columns =
  "(job_id uuid not null, stream text not null, lease_id bigint not null, " +
  "attempt int not null, sequence bigint not null, data TYPE not null, " +
  "received_at timestamptz not null default now(), primary key (job_id, " +
  "stream, lease_id, sequence))";
const forms: Record<
  string,
  {
    readonly type: string;
    readonly run: (c: pg.Client, table: string, job: string, base: number) => Promise<unknown>;
  }
> = {
  nested: {
    type: "jsonb",
    run: (c, table, job, base) => {
      const items = Array.from(
        { length: linesPerStatement },
        (_, i) => `[${base + i + 1},${data}]`,
      );
      return c.query(
        `insert into ${table} (job_id, stream, lease_id, attempt, sequence, data)
         select $1::uuid, 'logs', 1, 1, (m.value ->> 0)::bigint, m.value -> 1
         from jsonb_array_elements($2::jsonb) with ordinality batch(items, b) cross join lateral jsonb_array_elements(batch.items) with ordinality m(value, n)`,
        [job, `[[${items.join(",")}]]`],
      );
    },
  },
  ranged: {
    type: "jsonb",
    run: (c, table, job, base) =>
      c.query(
        `insert into ${table} (job_id, stream, lease_id, attempt, sequence, data)
         select $1::uuid, 'logs', 1, 1, ($2::bigint[])[m.n], $3::jsonb -> (m.n - 1)
         from generate_series(1, ${linesPerStatement}) m(n)`,
        [
          job,
          `{${Array.from({ length: linesPerStatement }, (_, i) => base + i + 1).join(",")}}`,
          `[${Array(linesPerStatement).fill(data).join(",")}]`,
        ],
      ),
  },
  ...Object.fromEntries(
    (["jsonb", "json", "text"] as const).map((type) => [
      type === "jsonb" ? "zipped" : type,
      {
        type,
        run: (c: pg.Client, table: string, job: string, base: number) =>
          c.query(
            `insert into ${table} (job_id, stream, lease_id, attempt, sequence, data)
             select $1::uuid, 'logs', 1, 1, m.sequence, m.data${type === "jsonb" ? "" : `::${type}`}
             from rows from (unnest($2::bigint[]), ${type === "jsonb" ? "jsonb_array_elements($3::jsonb)" : "json_array_elements($3::json)"}) m(sequence, data)`,
            [
              job,
              `{${Array.from({ length: linesPerStatement }, (_, i) => base + i + 1).join(",")}}`,
              `[${Array(linesPerStatement).fill(data).join(",")}]`,
            ],
          ),
      },
    ]),
  ),
};

const client = new pg.Client({ connectionString: url });
await client.connect();
try {
  const pid = (await client.query<{ pid: number }>("select pg_backend_pid() as pid")).rows[0]!.pid;
  console.log(`| form | data column | round | backend CPU µs a line | wall µs a line |`);
  console.log(`|---|---|--:|--:|--:|`);
  for (let round = 1; round <= rounds; round++) {
    for (const [name, form] of Object.entries(forms)) {
      // A fresh table for each cell: a growing index would make later cells dearer.
      const table = `pg_line_cost_${name}`;
      await client.query(
        `drop table if exists ${table}; create table ${table} ${columns.replace("TYPE", form.type)}`,
      );
      const job = randomUUID();
      const cpu0 = cpuMsOf(pid);
      const t0 = performance.now();
      for (let s = 0; s < statements; s++)
        await form.run(client, table, job, s * linesPerStatement);
      const lines = statements * linesPerStatement;
      const cpuMicros = ((cpuMsOf(pid) - cpu0) * 1000) / lines;
      console.log(
        `| ${name} | ${form.type} | ${round} | ${cpuMicros.toFixed(2)} | ` +
          `${(((performance.now() - t0) * 1000) / lines).toFixed(2)} |`,
      );
      await client.query(`drop table ${table}`);
    }
  }
} finally {
  await client.end();
}
