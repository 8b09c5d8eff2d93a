// Scenario 3, stream ingest: 1 and 50 leases at once send log lines of 100 B
// and of 10 KiB to the control plane, through NDJSON (POST /v1/runner/logs)
// and through gRPC client streaming (RunnerService.Logs); the lines and bytes
// stored are counted in the database after each cell. Beside each cell, the
// bare limit: the same client code sends the same request bodies to a plain
// Node HTTP/2 TLS server that reads and discards them. The control plane runs
// in this process, the runners in a client process and the bare server in a
// third, so each has its own event loop. Run: npm run bench:streams
import { sql, type Kysely } from "kysely";
import type { Database } from "../src/store/schema.js";
import type { SendResult } from "./clients/log-streams.js";
import { startPlanes } from "./lib/control-planes.js";
import { startCpuMeter, type CpuUse } from "./lib/cpu.js";
import { freshDatabase } from "./lib/database.js";
import { forkProcess } from "./lib/fork.js";
import { postmasterPid } from "./lib/machine.js";
import { intFlag, intListFlag, parseOptions } from "./lib/options.js";
import { createBenchPki } from "./lib/pki.js";
import { bulkInsertJobs } from "./lib/queue-sql.js";
import { publishScenario } from "./lib/report.js";
import { ratio, round } from "./lib/stats.js";

const options = parseOptions(process.argv.slice(2), {
  leases: "string",
  "line-bytes": "string",
  transports: "string",
  seconds: "string",
  scale: "string",
});
const tiny = options.size === "tiny";
const leaseCounts = intListFlag(options.flags.leases, "leases", tiny ? [1, 4] : [1, 50]);
const lineSizes = intListFlag(options.flags["line-bytes"], "line-bytes", [100, 10 * 1024]);
const transports = String(options.flags.transports ?? "ndjson,grpc").split(",") as Array<
  "ndjson" | "grpc"
>;
for (const t of transports)
  if (t !== "ndjson" && t !== "grpc")
    throw new Error(`--transports: ${JSON.stringify(t)} is not ndjson or grpc`);
/** A cell stops starting requests after this long (ours and bare alike); a cut cell says so. */
const cellSeconds = intFlag(options.flags.seconds, "seconds", tiny ? 10 : 25, 1, 300);
/** Multiplies the lines per lease (--scale 2: twice as many). */
const scale = intFlag(options.flags.scale, "scale", 1, 1, 1000);
const workspaceId = "w1";

/**
 * Lines each lease sends: enough for every cell to move megabytes and run for
 * seconds at full size, and the whole scenario to stay near a minute on two
 * cores. 100 B: 40,000 lines on one lease, 50 × 3,000; 10 KiB: 6,000 on one
 * lease (61 MB), 50 × 300 (154 MB).
 */
function linesPerLease(leases: number, lineBytes: number): number {
  if (tiny) return lineBytes <= 1024 ? 600 : 60;
  return scale * (lineBytes <= 1024 ? (leases === 1 ? 40_000 : 3_000) : leases === 1 ? 6_000 : 300);
}

/**
 * Lines per request: the batching of the runner agent's former output sink
 * (http-output.ts, since replaced by src/runner/output/stream-writer.ts,
 * which batches up to 1 MB), kept so runs stay comparable:
 * at most 500 lines and 512 KiB per request; an NDJSON line is the text plus
 * about 250 bytes of envelope (apiVersion, ids, lease token, sequence).
 */
function linesPerRequest(lineBytes: number): number {
  return Math.max(1, Math.min(500, Math.floor((512 * 1024) / (lineBytes + 256))));
}

/** One side of a cell: the control plane storing, or the bare server discarding. */
interface Side {
  readonly lines: number;
  readonly bytes: number;
  readonly seconds: number;
  readonly linesPerSecond: number;
  readonly megabytesPerSecond: number;
  readonly requests: number;
  /** Bytes of the request bodies: counted by the client (NDJSON) or the bare server (both). */
  readonly bodyBytes: number | null;
  readonly cpu: CpuUse | undefined;
  /** "all stored" ("all acknowledged" for bare), or what is short and why. */
  readonly check: string;
  readonly complete: boolean;
  /** Ours: the transactions that stored the lines (batches). */
  readonly commits?: number;
  /** Ours: the batches that stored the lines (a commit can store batches of many leases). */
  readonly batches?: number;
}
/** One cell of the matrix. */
interface Cell {
  readonly leases: number;
  readonly lineBytes: number;
  readonly transport: "ndjson" | "grpc";
  readonly linesPerLease: number;
  readonly linesPerRequest: number;
  readonly planned: number;
  readonly ours: Side;
  readonly bare: Side;
}

const started = performance.now();
const cells: Cell[] = [];
const postmaster = await postmasterPid(options.databaseUrl);
const pki = await createBenchPki();
const database = await freshDatabase(options.databaseUrl, options.databaseName);
const client = forkProcess(new URL("./clients/log-streams.ts", import.meta.url));
const bareServer = forkProcess(new URL("./servers/bare-h2.ts", import.meta.url));
try {
  // Leases of 10 minutes: a cell never outlives its leases.
  const planes = await startPlanes({
    pki,
    database: database.location,
    mode: "in-process",
    count: 1,
    leaseSeconds: 600,
  });
  try {
    const plane = planes.inProcess!;
    const bare = await bareServer.call<{ url: string; pid: number }>({
      type: "start",
      certPem: pki.server.certPem,
      keyPem: pki.server.keyPem,
      caPem: pki.ca.certPem,
    });
    const runners = await pki.runners("s", Math.max(...leaseCounts), workspaceId);
    await client.call({ type: "connect", url: planes.urls[0], caPem: pki.ca.certPem, runners });
    for (const lineBytes of lineSizes) {
      for (const leases of leaseCounts) {
        for (const transport of transports) {
          const cell = {
            leases,
            lineBytes,
            transport,
            linesPerLease: linesPerLease(leases, lineBytes),
            linesPerRequest: linesPerRequest(lineBytes),
          };
          const planned = leases * cell.linesPerLease;
          console.log(
            `streams-ingest: ${leases} lease(s) × ` +
              `${cell.linesPerLease.toLocaleString("en-US")} lines of ` +
              `${sizeLabel(lineBytes)}, ${transport}, ${cell.linesPerRequest} lines ` +
              `per request`,
          );
          await bulkInsertJobs(plane.store.db, leases, workspaceId);
          await client.call({ type: "claim", count: leases });
          const send = (url: string) => ({
            type: "send",
            url,
            transport,
            lineBytes,
            linesPerLease: cell.linesPerLease,
            linesPerRequest: cell.linesPerRequest,
            maxMs: cellSeconds * 1000,
          });

          let meter = startCpuMeter({ server: planes.pids, client: [client.pid] }, postmaster);
          const oursSent = await client.call<SendResult>(send(planes.urls[0]!));
          const oursCpu = meter.stop();
          const ours = await storedSide(plane.store.db, oursSent, lineBytes, planned, oursCpu);

          meter = startCpuMeter({ server: [bare.pid], client: [client.pid] }, postmaster);
          const bareSent = await client.call<SendResult>(send(bare.url));
          const bareCpu = meter.stop();
          const received = await bareServer.call<{ requests: number; bodyBytes: number }>({
            type: "stats",
          });
          const bareSide = discardedSide(bareSent, received, lineBytes, planned, bareCpu);

          await client.call({ type: "complete" });
          // Each cell starts from an empty log table, as in a fresh database: a later cell does not
          // pay for the index an earlier one grew (and the embedded database gives its memory
          // back).
          await sql`truncate stream_messages`.execute(plane.store.db);
          cells.push({ ...cell, planned, ours, bare: bareSide });
          console.log(
            `  ours: ${ours.linesPerSecond.toLocaleString("en-US")} lines/s, ` +
              `${ours.megabytesPerSecond} MB/s (${ours.check}); bare: ` +
              `${bareSide.linesPerSecond.toLocaleString("en-US")} lines/s, ` +
              `${bareSide.megabytesPerSecond} MB/s`,
          );
        }
      }
    }
  } finally {
    await planes.close();
  }
} finally {
  await client.close();
  await bareServer.close();
  await database.drop();
  await pki.dispose();
}

const notes = [
  "The control plane runs in the orchestrating process (as " +
    "lease-throughput's one-process row; its store is where the lines are " +
    "counted, embedded or not), the runners in a client process and the bare " +
    "server in a third: each has its own event loop.",
  `Each lease is a runner with its own certificate and HTTP/2 + TLS 1.3 ` +
    `connection, holding one leased job; all leases of a cell send at once, ` +
    `one request in flight each. A line is {"stream":"stdout","text":…} with ` +
    `a text of exactly the line size; requests carry ` +
    `${lineSizes.map((b) => `${linesPerRequest(b)} lines (${sizeLabel(b)})`).join(", ")}, ` +
    `the runner agent's batching (at most 500 lines and 512 KiB per ` +
    `request). A cell stops starting requests after ${cellSeconds} s.`,
  "NDJSON: POST /v1/runner/logs through the runner's stream writer " +
    "(src/runner/output/stream-writer.ts). gRPC: client streaming " +
    "RunnerService.Logs through a generated client (@connectrpc/connect-node " +
    "createGrpcTransport), one call per request.",
  "Lines and MB stored are counted in stream_messages after each cell (MB: " +
    "bytes of log text, 10^6), and checked lease by lease against the lines " +
    "the control plane confirmed: the count and the first and last sequence. " +
    "The check column says when a cell stored fewer lines than it sent, or " +
    "was cut by the time bound. The table is emptied after each cell, so " +
    "every cell starts from an empty one.",
  "Bare: the same client code sends the same request bodies (same leases, " +
    "tokens and sequences) to a plain Node HTTP/2 TLS 1.3 server in its own " +
    "process (bench/servers/bare-h2.ts: same certificates, client " +
    "certificate requested, the control plane's HTTP/2 windows) that reads " +
    "and discards each body and replies 200. ours ÷ bare compares lines/s.",
  "Lines per batch and per commit: lines stored over the batches that " +
    "stored them (distinct received_at per job) and over the transactions " +
    "(distinct received_at in the cell). The control plane stores what has " +
    "arrived of a request whenever reading on would wait for the network, so " +
    "lines per batch shows how the bodies arrived: an NDJSON body comes in " +
    "large chunks, a gRPC stream message by message as the client encodes " +
    "them. The batches that requests on many leases have ready at once share " +
    "a statement and its commit (src/streams/append.ts, createAppender), so " +
    "a commit holds more lines than a batch.",
  "CPU columns: percent of one core over the cell (server = the control " +
    "plane, or the bare server; client = the runner process; pg = every " +
    "process of the Postgres server). Node runs each event loop on one core: " +
    "a role near 100% is that row's limit. The limit column names a role at " +
    "85% of a core or more; else machine when all cores were 90% busy (other " +
    "work on the machine included); else waits: commits, fsync and round " +
    "trips. Where the bare side is limited by the client, the bare figure is " +
    "what this client can send, not what a server can take.",
  options.databaseUrl
    ? "Postgres: each batch of a request's lines is one INSERT … SELECT and " +
      "one commit (src/streams/append.ts); with fsync on, every commit waits " +
      "for a WAL flush (the machine line shows fsync and synchronous_commit)."
    : "Embedded: the database (PGlite, in memory: no fsync) runs inside the " +
      "control plane's process, so the server column is the control plane and " +
      "the database together, on one core.",
];

await publishScenario(options, started, {
  scenario: "streams-ingest",
  title: "Stream ingest",
  notes,
  table: {
    title:
      "Stream ingest: log lines stored, against a bare HTTP/2 server discarding the same bodies",
    columns: [
      "leases",
      "line",
      "transport",
      "lines stored",
      "MB stored",
      "s",
      "lines/s",
      "MB/s",
      "bare lines/s",
      "bare MB/s",
      "ours ÷ bare",
      "lines per batch",
      "lines per commit",
      "CPU % server/client/pg",
      "bare CPU % server/client",
      "limit: ours / bare",
      "check",
    ],
    rows: cells.map((c) => [
      c.leases,
      sizeLabel(c.lineBytes),
      c.transport === "ndjson" ? "NDJSON" : "gRPC stream",
      c.ours.lines,
      round(c.ours.bytes / 1e6, 1),
      c.ours.seconds,
      c.ours.linesPerSecond,
      c.ours.megabytesPerSecond,
      c.bare.linesPerSecond,
      c.bare.megabytesPerSecond,
      ratio(c.ours.linesPerSecond, c.bare.linesPerSecond),
      c.ours.batches ? Math.round(c.ours.lines / c.ours.batches) : null,
      c.ours.commits ? Math.round(c.ours.lines / c.ours.commits) : null,
      cpuCell(c.ours.cpu, true),
      cpuCell(c.bare.cpu, false),
      c.ours.cpu && c.bare.cpu ? `${limitOf(c.ours.cpu)} / ${limitOf(c.bare.cpu)}` : null,
      c.bare.complete ? c.ours.check : `${c.ours.check}; bare: ${c.bare.check}`,
    ]),
  },
  figures: { leaseCounts, lineSizes, transports, cellSeconds, scale, cells },
});

/**
 * What the control plane stored for the cell's leases, checked against what it confirmed to the
 * client.
 */
async function storedSide(
  db: Kysely<Database>,
  sent: SendResult,
  lineBytes: number,
  planned: number,
  cpu: CpuUse | undefined,
): Promise<Side> {
  const jobIds = sent.leases.map((l) => l.jobId);
  // received_at is now() of the storing transaction: its distinct values per job count the batches,
  // in the cell the commits.
  const { rows } = await sql<{
    job_id: string;
    lines: number;
    first: number;
    last: number;
    bytes: number;
    commits: number;
  }>`
    select job_id, count(*)::int as lines, min(sequence)::int8 as first, max(sequence)::int8 as last,
           coalesce(sum(octet_length(data ->> 'text')), 0)::int8 as bytes, count(distinct received_at)::int as commits
    from stream_messages where stream = 'logs' and job_id in (${sql.join(jobIds)}) group by job_id`.execute(
    db,
  );
  const byJob = new Map(rows.map((r) => [r.job_id, r]));
  const lines = rows.reduce((a, r) => a + r.lines, 0);
  const bytes = rows.reduce((a, r) => a + Number(r.bytes), 0);
  const short: string[] = [];
  for (const lease of sent.leases) {
    const r = byJob.get(lease.jobId);
    const stored = r?.lines ?? 0;
    if (stored !== lease.confirmed || (stored > 0 && (r!.first !== 1 || r!.last !== stored)))
      short.push(
        `job ${lease.jobId}: ${stored} stored (sequences ` +
          `${r?.first ?? "–"}..${r?.last ?? "–"}), ${lease.confirmed} confirmed`,
      );
  }
  if (bytes !== lines * lineBytes)
    short.push(`${bytes} bytes of text stored, ${lines * lineBytes} expected`);
  const batches = rows.reduce((a, r) => a + r.commits, 0);
  const { rows: cell } = await sql<{ commits: number }>`
    select count(distinct received_at)::int as commits from stream_messages where stream = 'logs'
      and job_id in (${sql.join(jobIds)})`.execute(db);
  return {
    ...side(sent, lines, bytes, planned, cpu, sent.bodyBytes, short, "all stored"),
    batches,
    commits: cell[0]?.commits ?? 0,
  };
}

/** What the bare server took: the lines it acknowledged (it stores nothing). */
function discardedSide(
  sent: SendResult,
  received: { requests: number; bodyBytes: number },
  lineBytes: number,
  planned: number,
  cpu: CpuUse | undefined,
): Side {
  const lines = sent.leases.reduce((a, l) => a + l.confirmed, 0);
  const short =
    received.requests === sent.requests
      ? []
      : [`${received.requests} requests received, ${sent.requests} sent`];
  return side(
    sent,
    lines,
    lines * lineBytes,
    planned,
    cpu,
    received.bodyBytes,
    short,
    "all acknowledged",
  );
}

function side(
  sent: SendResult,
  lines: number,
  bytes: number,
  planned: number,
  cpu: CpuUse | undefined,
  bodyBytes: number | null,
  short: string[],
  ok: string,
): Side {
  const seconds = sent.elapsedMs / 1000;
  const confirmed = sent.leases.reduce((a, l) => a + l.confirmed, 0);
  const failures = sent.leases.filter((l) => l.failure);
  if (failures.length > 0)
    short.unshift(`${failures.length} lease(s) refused: ${failures[0]!.failure}`);
  else if (!sent.cut && confirmed < planned)
    short.unshift(
      `${confirmed.toLocaleString("en-US")} of ${planned.toLocaleString("en-US")} lines confirmed`,
    );
  const cut = sent.cut
    ? `cut at ${cellSeconds} s: ${confirmed.toLocaleString("en-US")} of ${planned.toLocaleString("en-US")} lines sent`
    : undefined;
  const complete = !cut && short.length === 0 && lines === planned;
  return {
    lines,
    bytes,
    seconds: round(seconds, 2),
    linesPerSecond: Math.round(lines / seconds),
    megabytesPerSecond: round(bytes / 1e6 / seconds, 2),
    requests: sent.requests,
    bodyBytes,
    cpu,
    check: complete ? ok : [cut, ...(short.length > 0 ? short : [ok])].filter(Boolean).join("; "),
    complete,
  };
}

/**
 * What most likely held a figure back: a role using 85% of a core or more
 * (its event loop is saturated), else the machine when its cores were 90%
 * busy (with other work too), else waiting (commits, fsync, round trips).
 */
function limitOf(cpu: CpuUse): string {
  const [role, pct] = Object.entries(cpu.rolesPctOfCore).sort((a, b) => b[1] - a[1])[0] ?? ["", 0];
  if (pct >= 85) return `${role} CPU`;
  if (cpu.machineBusyPct >= 90) return `machine ${cpu.machineBusyPct}% busy`;
  return "waits";
}

function cpuCell(cpu: CpuUse | undefined, withPostgres: boolean): string | null {
  if (!cpu) return null;
  const r = cpu.rolesPctOfCore;
  return [r.server ?? 0, r.client ?? 0, ...(withPostgres ? [r.postgres ?? "–"] : [])].join("/");
}

function sizeLabel(bytes: number): string {
  return bytes % 1024 === 0 ? `${bytes / 1024} KiB` : `${bytes} B`;
}
