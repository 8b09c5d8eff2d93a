// Scenario 4, connections: idle registered runners holding HTTP/2 sessions
// (control-plane RSS per runner), and full mTLS handshakes per second through
// the control plane against a bare Node HTTP/2 TLS server with the same
// certificates (the cost of the identity check). The control plane is one
// `forelead serve` process, so its RSS is its own. Run: npm run bench:connections
import { startPlanes } from "./lib/control-planes.js";
import { residentBytes, startCpuMeter, type CpuUse } from "./lib/cpu.js";
import { freshDatabase } from "./lib/database.js";
import { forkProcess, type BenchProcess } from "./lib/fork.js";
import { postmasterPid } from "./lib/machine.js";
import { intFlag, intListFlag, parseOptions } from "./lib/options.js";
import { createBenchPki, type RunnerIdentity } from "./lib/pki.js";
import { publishScenario } from "./lib/report.js";
import { ratio, round, summarize, type LatencySummary } from "./lib/stats.js";

const options = parseOptions(process.argv.slice(2), {
  runners: "string",
  "handshake-seconds": "string",
  concurrency: "string",
});
const tiny = options.size === "tiny";
const targets = intListFlag(
  options.flags.runners,
  "runners",
  tiny ? [10, 20] : [2_000, 10_000],
).sort((a, b) => a - b);
const handshakeMs =
  intFlag(options.flags["handshake-seconds"], "handshake-seconds", tiny ? 1 : 10, 1, 600) * 1000;
const concurrency = intFlag(options.flags.concurrency, "concurrency", tiny ? 4 : 16, 1, 1000);
const clientCount = tiny ? 1 : 2;
const sessionsScript = new URL("./clients/sessions.ts", import.meta.url);
const workspaceId = "w1";

interface Held {
  readonly runners: number;
  readonly rssBytes: number;
  readonly perRunnerBytes: number;
  readonly openSeconds: number;
  readonly clientRssBytes: number;
}
interface Handshakes {
  readonly server: string;
  readonly completed: number;
  readonly failures: number;
  readonly perSecond: number;
  readonly latency: LatencySummary;
  readonly cpu: CpuUse | undefined;
  /**
   * Server CPU time per connection (handshake + one request): what the machine's load does not
   * hide.
   */
  readonly serverCpuMs: number | null;
}

const started = performance.now();
const postmaster = await postmasterPid(options.databaseUrl);
const pki = await createBenchPki();
const database = await freshDatabase(options.databaseUrl, options.databaseName);
const clients: BenchProcess[] = Array.from({ length: clientCount }, () =>
  forkProcess(sessionsScript),
);
const held: Held[] = [];
const handshakes: Handshakes[] = [];
let baselineRss = 0;
try {
  const identities = await pki.runners("c", targets[targets.length - 1]!, workspaceId);
  const planes = await startPlanes({
    pki,
    database: database.location,
    mode: "processes",
    count: 1,
  });
  try {
    const pid = planes.pids[0]!;
    // Handshakes first, on a fresh server, as the bare server will be measured.
    console.log(`connections: handshakes through the control plane for ${handshakeMs / 1000} s`);
    handshakes.push(
      await measureHandshakes(
        "control plane (GET /v1/runner/clock)",
        planes.urls[0]!,
        "/v1/runner/clock",
        pid,
        identities,
      ),
    );
    await settle();
    baselineRss = residentBytes(pid) ?? 0;
    let opened = 0;
    for (const target of targets) {
      console.log(`connections: opening sessions up to ${target.toLocaleString("en-US")}`);
      const t0 = performance.now();
      const batch = identities.slice(opened, target);
      const replies = await Promise.all(
        clients.map((c, k) =>
          c.call<{ rssBytes: number }>({
            type: "open",
            url: planes.urls[0],
            caPem: pki.ca.certPem,
            identities: batch.filter((_, i) => i % clientCount === k),
            concurrency: 32,
          }),
        ),
      );
      const openSeconds = round((performance.now() - t0) / 1000, 1);
      opened = target;
      await settle();
      const rss = residentBytes(pid) ?? 0;
      held.push({
        runners: target,
        rssBytes: rss,
        perRunnerBytes: Math.round((rss - baselineRss) / target),
        openSeconds,
        clientRssBytes: replies.reduce((a, r) => a + r.rssBytes, 0),
      });
    }
    await Promise.all(clients.map((c) => c.call({ type: "close-all" })));
  } finally {
    await planes.close();
  }
  const bare = forkProcess(new URL("./servers/bare-h2.ts", import.meta.url));
  try {
    const { url, pid } = await bare.call<{ url: string; pid: number }>({
      type: "start",
      certPem: pki.server.certPem,
      keyPem: pki.server.keyPem,
      caPem: pki.ca.certPem,
    });
    console.log(
      `connections: handshakes against a bare Node HTTP/2 TLS server for ${handshakeMs / 1000} s`,
    );
    handshakes.push(
      await measureHandshakes("bare Node HTTP/2 TLS server", url, "/", pid, identities),
    );
  } finally {
    await bare.close();
  }
} finally {
  await Promise.all(clients.map((c) => c.close()));
  await database.drop();
  await pki.dispose();
}

const [ours, bare] = handshakes;
const notes = [
  `Idle runners: each has its own certificate, opens its own HTTP/2 + TLS ` +
    `1.3 connection, registers (POST /v1/runner/register) and then stays ` +
    `idle; ${clientCount} client process(es) hold them, opening 32 at a time ` +
    `each. RSS is the control plane's (one \`forelead serve\` process, after ` +
    `the handshake test) minus its RSS before the first idle connection, ` +
    `divided by the runners held; it includes garbage not yet collected.`,
  `Handshakes: ${concurrency} loops in one client process, each opening a ` +
    `new connection (full TLS 1.3 handshake with a client certificate, no ` +
    `resumption), sending one GET and closing, for ${handshakeMs / 1000} s. ` +
    `The control plane checks the certificate (chain, lifetime, SPIFFE ID: ` +
    `parsed once per connection), audits the request and answers; the bare ` +
    `server only answers.`,
  "Client and server share the 2 cores: a full handshake costs the client " +
    "about as much CPU as the server, so both figures are bounded by the " +
    "machine, and their ratio is the cost of what the control plane adds.",
];
if (tiny && targets[targets.length - 1]! < 10_000)
  notes.push("Tiny size: a few dozen runners; the published figures use 2,000 and 10,000.");

await publishScenario(options, started, {
  scenario: "connections",
  title: "Connections",
  notes,
  table: {
    title: "Connections: idle runners and full mTLS handshakes",
    columns: ["measure", "count", "value", "unit"],
    rows: [
      ["control-plane RSS before connections", 0, round(baselineRss / 2 ** 20, 1), "MiB"],
      ...held.flatMap((h) => [
        [
          "control-plane RSS with idle registered runners",
          h.runners,
          round(h.rssBytes / 2 ** 20, 1),
          "MiB",
        ] as const,
        ["  per runner", h.runners, round(h.perRunnerBytes / 1024, 1), "KiB"] as const,
        ["  time to connect and register them", h.runners, h.openSeconds, "s"] as const,
      ]),
      ...handshakes.map(
        (h) =>
          [
            `handshakes + 1 request: ${h.server}`,
            concurrency,
            round(h.perSecond, 0),
            "per s",
          ] as const,
      ),
      ...handshakes.map(
        (h) => [`  p50 connect → reply: ${h.server}`, concurrency, h.latency.p50, "ms"] as const,
      ),
      ...handshakes.map(
        (h) =>
          [
            `  CPU server/client: ${h.server}`,
            concurrency,
            h.cpu ? `${h.cpu.rolesPctOfCore.server}/${h.cpu.rolesPctOfCore.client}` : null,
            "% of a core",
          ] as const,
      ),
      ...handshakes.map(
        (h) =>
          [`  server CPU per connection: ${h.server}`, concurrency, h.serverCpuMs, "ms"] as const,
      ),
      [
        "control plane ÷ bare server (handshakes/s)",
        concurrency,
        ratio(ours?.perSecond, bare?.perSecond),
        "ratio",
      ],
      [
        "control plane ÷ bare server (server CPU per connection)",
        concurrency,
        ratio(ours?.serverCpuMs ?? undefined, bare?.serverCpuMs ?? undefined),
        "ratio",
      ],
    ],
  },
  figures: { targets, concurrency, handshakeMs, baselineRssBytes: baselineRss, held, handshakes },
});

async function measureHandshakes(
  server: string,
  url: string,
  path: string,
  pid: number,
  identities: readonly RunnerIdentity[],
): Promise<Handshakes> {
  const client = clients[0]!;
  const meter = startCpuMeter({ server: [pid], client: [client.pid] }, postmaster);
  const r = await client.call<{
    completed: number;
    failures: number;
    elapsedMs: number;
    latencies: number[];
  }>({
    type: "handshakes",
    url,
    caPem: pki.ca.certPem,
    identities: identities.slice(0, 64),
    durationMs: handshakeMs,
    concurrency,
    path,
  });
  const cpu = meter.stop();
  const serverCpuMs =
    cpu && r.completed
      ? round((((cpu.rolesPctOfCore.server ?? 0) / 100) * cpu.wallMs) / r.completed, 2)
      : null;
  return {
    server,
    completed: r.completed,
    failures: r.failures,
    perSecond: (r.completed / r.elapsedMs) * 1000,
    latency: summarize(r.latencies),
    cpu,
    serverCpuMs,
  };
}

/**
 * Lets the server finish what the last requests started (audit flushes, GC) before reading its RSS.
 */
function settle(): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, tiny ? 200 : 2000));
}
