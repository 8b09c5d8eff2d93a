// Log ingest benchmark: 50 leases push logs at once through the runner's
// stream writer (src/runner/stream-writer.ts) to a control plane this script
// starts in a child process on loopback (so client and server each have an
// event loop). Prints lines/s and MB/s stored (MB of the stored data's JSON
// text, as counted in the database afterwards; the NDJSON on the wire is
// about twice that with each message's envelope) and writes
// bench/results/streams-ingest.json.
//
//   node --import tsx bench/streams-ingest.ts [--leases 50] [--lines 4000] [--line-bytes 100] [--slice 500] [--seconds 120]
//
// Each lease writes its lines --slice at a time and waits until they are
// stored before writing more, like a job whose output arrives over time.
//
// With DATABASE_URL set it creates (and drops) a fresh database on that
// server; otherwise the control plane runs on embedded PGlite in memory.
import "reflect-metadata";
import { spawn, type ChildProcess } from "node:child_process";
import http2 from "node:http2";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { cpus, loadavg } from "node:os";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import pg from "pg";
import { sql } from "kysely";
import { createCertificateAuthority, issueClientCertificate, issueServerCertificate } from "../src/identity/ca.js";
import { createLeaseStreams, createSessionPost, type NdjsonPost } from "../src/runner/stream-writer.js";
import { startControlPlane } from "../src/server/control-plane.js";

const { values: args } = parseArgs({
  options: {
    serve: { type: "boolean", default: false },
    leases: { type: "string", default: "50" },
    lines: { type: "string", default: "4000" },
    "line-bytes": { type: "string", default: "100" },
    seconds: { type: "string", default: "120" },
    slice: { type: "string", default: "500" },
  },
});

if (args.serve) await serve();
else await bench();

/** The child: a control plane whose parameters arrive on stdin; answers "stats" with what is stored. */
async function serve(): Promise<void> {
  const lines = createInterface({ input: process.stdin });
  const it = lines[Symbol.asyncIterator]();
  const config = JSON.parse((await it.next()).value as string);
  const plane = await startControlPlane({ host: "127.0.0.1", port: 0, trustDomain: "forelead", leaseSeconds: 600, maxCertLifetimeMs: 86_400_000, ...config });
  console.log(JSON.stringify({ url: plane.url }));
  for await (const line of { [Symbol.asyncIterator]: () => it }) {
    if (line !== "stats") break;
    const { rows } = await sql<{ lines: number; bytes: number }>`select count(*)::bigint as lines, coalesce(sum(octet_length(data::text)), 0)::bigint as bytes from stream_messages`.execute(plane.store.db);
    console.log(JSON.stringify(rows[0]));
  }
  await plane.close();
}

async function bench(): Promise<void> {
  const leases = Number(args.leases);
  const linesPerLease = Number(args.lines);
  const lineBytes = Number(args["line-bytes"]);
  const maxSeconds = Number(args.seconds);
  const slice = Number(args.slice);
  const database = await benchDatabase();

  const ca = await createCertificateAuthority({ commonName: "bench CA" });
  const server = await issueServerCertificate(ca, { hosts: ["127.0.0.1"] });
  const adminCert = await issueClientCertificate(ca, { uris: ["spiffe://forelead/services/bench"] });
  const child = spawn(process.execPath, [...(process.env.BENCH_PROFILE ? ["--cpu-prof", "--cpu-prof-dir", process.env.BENCH_PROFILE] : []), "--import", "tsx", fileURLToPath(import.meta.url), "--serve"], { stdio: ["pipe", "pipe", "inherit"] });
  const replies = createInterface({ input: child.stdout! })[Symbol.asyncIterator]();
  const ask = async (line: string) => {
    child.stdin!.write(`${line}\n`);
    return JSON.parse((await replies.next()).value as string);
  };
  try {
    const { url } = await ask(
      JSON.stringify({ tlsCertPem: server.certPem, tlsKeyPem: server.keyPem, clientCaPem: ca.certPem, database: database.location, admins: ["spiffe://forelead/services/bench"] }),
    );
    const admin = connect(url, ca.certPem, adminCert);
    const runners = await Promise.all(
      Array.from({ length: leases }, async (_, i) => {
        const cert = await issueClientCertificate(ca, { uris: [`spiffe://forelead/runners/r${i}/workspaces/bench${i}`] });
        const session = connect(url, ca.certPem, cert);
        await call(session, "POST", "/v1/runner/register", { apiVersion: "v1", runnerId: `r${i}`, workspaceId: `bench${i}`, slots: 1, labels: ["linux"] });
        await call(admin, "POST", "/v1/admin/jobs", { apiVersion: "v1", workspaceId: `bench${i}`, labels: ["linux"], spec: { image: "busybox", argv: ["true"] } });
        const lease = await call(session, "POST", "/v1/runner/claim", { apiVersion: "v1", runnerId: `r${i}` });
        return { i, session, jobId: lease.job!.id, token: lease.token! };
      }),
    );

    const text = (i: number) => `line ${i} `.padEnd(lineBytes - 1, "x") + "\n";
    let requests = 0;
    const deadline = Date.now() + maxSeconds * 1000;
    const started = performance.now();
    await Promise.all(
      runners.map(async (r) => {
        const real = createSessionPost(() => r.session);
        const post: NdjsonPost = (path, body, timeoutMs) => (requests++, real(path, body, timeoutMs));
        const { logs } = createLeaseStreams({ post, runnerId: `r${r.i}`, jobId: r.jobId, leaseToken: r.token });
        // Written in slices, so a lease never queues far ahead of what it has sent, like a real job's output.
        for (let line = 1; line <= linesPerLease && Date.now() < deadline; line += slice) {
          for (let j = line; j < line + slice && j <= linesPerLease; j++) logs.write({ stream: "stdout", text: text(j) });
          await logs.flush();
        }
      }),
    );
    const seconds = (performance.now() - started) / 1000;
    const stored = await ask("stats");
    const result = {
      at: new Date().toISOString(),
      node: process.version,
      cpus: cpus().length,
      // The machine's load when the run ended: numbers from a shared machine are only comparable at similar load.
      loadAverage1m: round(loadavg()[0]!),
      database: database.kind,
      leases,
      linesPerLease,
      lineBytes,
      slice,
      seconds: round(seconds),
      requests,
      linesStored: Number(stored.lines),
      bytesStored: Number(stored.bytes),
      linesPerSecond: Math.round(Number(stored.lines) / seconds),
      megabytesPerSecond: round(Number(stored.bytes) / seconds / 1e6),
      complete: Number(stored.lines) === leases * linesPerLease,
    };
    console.log(
      `streams ingest (${database.kind}): ${result.linesStored} lines (${round(result.bytesStored / 1e6)} MB of data) from ${leases} leases in ${result.seconds} s over ${requests} requests: ` +
        `${result.linesPerSecond} lines/s, ${result.megabytesPerSecond} MB/s stored${result.complete ? "" : " (INCOMPLETE: time bound reached)"}`,
    );
    // One entry per database kind, so a run on one does not erase the other's.
    const file = new URL("results/streams-ingest.json", import.meta.url);
    await mkdir(new URL("results/", import.meta.url), { recursive: true });
    const previous = await readFile(file, "utf8").then((t) => JSON.parse(t) as Record<string, unknown>, () => ({}));
    const kept = "database" in previous ? {} : previous; // the file's older single-run shape
    await writeFile(file, `${JSON.stringify({ ...kept, [database.kind]: result }, null, 2)}\n`);
    for (const r of runners) r.session.close();
    admin.close();
  } finally {
    await stop(child);
    await database.drop();
  }
}

function round(x: number): number {
  return Math.round(x * 100) / 100;
}

function connect(url: string, ca: string, cert: { certPem: string; keyPem: string }): http2.ClientHttp2Session {
  const session = http2.connect(url, { ca, cert: cert.certPem, key: cert.keyPem });
  session.on("error", (err) => console.error(`bench: connection error: ${err.message}`));
  return session;
}

/** A JSON reply of the control plane. */
interface Reply {
  readonly token?: string;
  readonly job?: { readonly id: string };
}

function call(session: http2.ClientHttp2Session, method: string, path: string, body: unknown): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const stream = session.request({ ":method": method, ":path": path, "content-type": "application/json" });
    const chunks: Buffer[] = [];
    let status = 0;
    stream.on("response", (h) => (status = Number(h[":status"])));
    stream.on("data", (c: Buffer) => chunks.push(c));
    stream.on("error", reject);
    stream.on("end", () => {
      const text = Buffer.concat(chunks).toString("utf8");
      if (status >= 300) reject(new Error(`${method} ${path}: ${status} ${text}`));
      else resolve(text ? JSON.parse(text) : {});
    });
    stream.end(JSON.stringify(body));
  });
}

async function benchDatabase(): Promise<{ location: string; kind: string; drop(): Promise<void> }> {
  const url = process.env.DATABASE_URL;
  if (!url) return { location: "memory://", kind: "embedded PGlite", drop: async () => {} };
  const name = `forelead_bench_${process.pid}`;
  const run = async (statement: string) => {
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    await client.query(statement).finally(() => client.end());
  };
  await run(`CREATE DATABASE ${name}`);
  const location = new URL(url);
  location.pathname = `/${name}`;
  return { location: location.toString(), kind: "postgres", drop: () => run(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`) };
}

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return;
  const exited = new Promise((resolve) => child.once("exit", resolve));
  child.stdin!.end();
  const killer = setTimeout(() => child.kill("SIGKILL"), 10_000);
  await exited;
  clearTimeout(killer);
}
