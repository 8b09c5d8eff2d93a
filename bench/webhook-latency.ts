// Webhook delivery latency (issue 50): a `forelead serve` process with 100 webhook subscriptions to
// a local HTTPS receiver (loopback: --webhook-allow-private, the receiver's CA by --webhook-ca);
// jobs are enqueued one at a time at a steady rate through the admin REST route, and each
// enqueue's job.queued event fans out to every subscription. The latency of a delivery is from its
// event's time (the `at` of the body: the database clock when the enqueue's transaction began) to
// the receiver having read the POST; one machine, one clock. Bounded: a fixed number of events,
// and a deadline for the deliveries after the last one. Run: npm run bench:webhooks
import { randomBytes } from "node:crypto";
import { writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { createRestClient } from "../test/support/clients.js";
import { startWebhookReceiver } from "../test/support/webhook-receiver.js";
import { startPlanes } from "./lib/control-planes.js";
import { startCpuMeter } from "./lib/cpu.js";
import { freshDatabase } from "./lib/database.js";
import { postmasterPid } from "./lib/machine.js";
import { intFlag, intListFlag, parseOptions } from "./lib/options.js";
import { createBenchPki } from "./lib/pki.js";
import { publishScenario } from "./lib/report.js";
import { round, summarize, type LatencySummary } from "./lib/stats.js";

const options = parseOptions(process.argv.slice(2), {
  subscriptions: "string",
  events: "string",
  rates: "string",
  warmup: "string",
});
const tiny = options.size === "tiny";
const subscriptionCount = intFlag(options.flags.subscriptions, "subscriptions", tiny ? 10 : 100);
const events = intFlag(options.flags.events, "events", tiny ? 10 : 60);
const rates = intListFlag(options.flags.rates, "rates", tiny ? [10] : [1, 5]);
/** Events sent first at the same rate and not counted: connections open, code is compiled. */
const warmup = intFlag(options.flags.warmup, "warmup", tiny ? 2 : 5, 0);
/** How long deliveries may take after the last event before the run gives up on them. */
const drainMs = 120_000;
const workspaceId = "wh-bench";

interface Row {
  readonly ratePerSecond: number;
  readonly events: number;
  readonly expected: number;
  readonly received: number;
  /** Deliveries of the counted events that arrived. */
  readonly counted: number;
  /** Event time → POST read by the receiver. */
  readonly latency: LatencySummary;
  /** p50 over each tenth of the events in order: a growing backlog shows as a climb. */
  readonly p50ByTenth: readonly number[];
  /** Counted deliveries over the time from the first counted event to the last delivery. */
  readonly deliveriesPerSecond: number;
  /** Deliveries whose subscription got them out of event order (must be 0). */
  readonly outOfOrder: number;
  readonly cpu: unknown;
}

const started = performance.now();
const postmaster = await postmasterPid(options.databaseUrl);
const secret = `whsec-${randomBytes(16).toString("hex")}`;
const receiver = await startWebhookReceiver(secret);
const pki = await createBenchPki();
const caFile = join(dirname(pki.files.ca), "webhook-ca.pem");
await writeFile(caFile, receiver.ca.certPem);
const rows: Row[] = [];
try {
  for (const rate of rates) {
    console.log(
      `webhook-latency: ${subscriptionCount} subscriptions, ${events} events at ${rate}/s`,
    );
    rows.push(await run(rate));
  }
} finally {
  await pki.dispose();
  await receiver.close();
}

async function run(rate: number): Promise<Row> {
  const database = await freshDatabase(options.databaseUrl, options.databaseName);
  try {
    const planes = await startPlanes({
      pki,
      database: database.location,
      mode: "processes",
      count: 1,
      serveArgs: ["--webhook-allow-private", "--webhook-ca", caFile],
    });
    const admin = createRestClient(planes.urls[0]!, pki.ca.certPem, pki.admin);
    try {
      const paths = Array.from({ length: subscriptionCount }, (_, i) => `/r${rate}/s${i}`);
      for (const path of paths) {
        const reply = await admin.request("POST", "/v1/admin/webhooks", {
          apiVersion: "v1",
          workspaceId,
          url: receiver.url(path),
          events: ["job.queued"],
          secret,
        });
        if (reply.status !== 200) throw new Error(`create webhook: ${reply.text}`);
      }
      const meter = startCpuMeter({ server: planes.pids, client: [process.pid] }, postmaster);
      // Each enqueue is sent when due, whatever the previous one is doing.
      const total = warmup + events;
      const t0 = performance.now();
      const sent: Promise<unknown>[] = [];
      for (let i = 0; i < total; i++) {
        const wait = t0 + (i * 1000) / rate - performance.now();
        if (wait > 0) await new Promise((r) => setTimeout(r, wait));
        sent.push(
          admin
            .request("POST", "/v1/admin/jobs", {
              apiVersion: "v1",
              workspaceId,
              labels: ["linux"],
              spec: { image: "busybox", argv: ["true"], timeoutSeconds: 60 },
            })
            .then((r) => {
              if (r.status !== 200) throw new Error(`enqueue: ${r.text}`);
            }),
        );
      }
      await Promise.all(sent);
      const expected = total * subscriptionCount;
      const deadline = Date.now() + drainMs;
      const count = () => paths.reduce((n, p) => n + receiver.received(p).length, 0);
      while (count() < expected && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 100));
      const cpu = meter.stop();

      // The events in id order; the first `warmup` are not counted.
      const all = paths.flatMap((p) => receiver.received(p).map((d) => ({ ...d, path: p })));
      const ids = [...new Set(all.map((d) => Number(d.body.id)))].sort((a, b) => a - b);
      const counted = new Set(ids.slice(warmup));
      const byEvent = new Map<number, number[]>();
      let outOfOrder = 0;
      for (const p of paths) {
        const got = receiver.received(p).map((d) => Number(d.body.id));
        for (let i = 1; i < got.length; i++) if (got[i]! <= got[i - 1]!) outOfOrder++;
      }
      let firstEventAt = Infinity;
      let lastAt = 0;
      for (const d of all) {
        const id = Number(d.body.id);
        if (!counted.has(id)) continue;
        if (!d.signatureValid) throw new Error(`delivery ${d.deliveryId}: bad signature`);
        const eventAt = Date.parse(String(d.body.at));
        firstEventAt = Math.min(firstEventAt, eventAt);
        lastAt = Math.max(lastAt, d.at);
        byEvent.set(id, [...(byEvent.get(id) ?? []), d.at - eventAt]);
      }
      const latencies = [...byEvent.values()].flat();
      const inOrder = [...counted].map((id) => byEvent.get(id) ?? []);
      const size = Math.max(1, Math.ceil(inOrder.length / 10));
      const p50ByTenth = Array.from(
        { length: Math.ceil(inOrder.length / size) },
        (_, i) => summarize(inOrder.slice(i * size, (i + 1) * size).flat()).p50,
      );
      return {
        ratePerSecond: rate,
        events,
        expected,
        received: all.length,
        counted: latencies.length,
        latency: summarize(latencies),
        p50ByTenth,
        deliveriesPerSecond: round(
          (latencies.length * 1000) / Math.max(1, lastAt - firstEventAt),
          1,
        ),
        outOfOrder,
        cpu,
      };
    } finally {
      await admin.close();
      await planes.close();
    }
  } finally {
    await database.drop();
  }
}

const notes = [
  `One forelead serve process (${options.databaseUrl ? "Postgres" : "embedded PGlite, memory://"}) ` +
    `with ${subscriptionCount} webhook subscriptions to job.queued, each to its own path of one ` +
    "HTTPS receiver in the benchmark's process on 127.0.0.1 (--webhook-allow-private, its CA by " +
    "--webhook-ca). Each job enqueued through POST /v1/admin/jobs writes one job.queued event, " +
    `which the statement trigger fans out to ${subscriptionCount} deliveries.`,
  `${events} events per row at a fixed rate (each enqueue sent when due), after ${warmup} more ` +
    "at that rate that are not counted. Latency: from the event's `at` (the database clock when " +
    "the enqueue's transaction began) to the receiver having read the POST's body.",
  "deliveries/s: counted deliveries over the time from the first counted event to the last " +
    "delivery. p50 by tenth: the latency p50 of each tenth of the events in order; a climb is a " +
    "backlog (the offered load is above what the replica delivers).",
];

await publishScenario(options, started, {
  scenario: "webhook-latency",
  title: "Webhook delivery latency",
  notes,
  table: {
    title: `Webhook delivery: event → POST received, ${subscriptionCount} subscriptions`,
    columns: [
      "events/s",
      "deliveries",
      "p50 ms",
      "p99 ms",
      "max ms",
      "deliveries/s",
      "p50 by tenth (ms)",
    ],
    rows: rows.map((r) => [
      r.ratePerSecond,
      `${r.counted}/${r.events * subscriptionCount}`,
      r.latency.p50,
      r.latency.p99,
      r.latency.max,
      r.deliveriesPerSecond,
      r.p50ByTenth.map((v) => Math.round(v)).join(" "),
    ]),
  },
  figures: { subscriptions: subscriptionCount, events, warmup, rows },
});
