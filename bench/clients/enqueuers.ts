// A client process enqueueing through the admin REST routes on one HTTP/2 +
// mTLS connection, a fixed number of requests in flight: single enqueues
// (POST /v1/admin/jobs) or batches (POST /v1/admin/jobs:batch). Run by
// bench/lib/fork.ts from bench/enqueue-throughput.ts.
import { connectH2, type H2Client } from "../lib/h2.js";
import { serveRequests, type Message } from "../lib/fork.js";
import { nowMs } from "../lib/stats.js";

let admin: H2Client | undefined;

serveRequests(async (m) => {
  switch (m.type) {
    case "connect":
      admin = await connectH2(m.url as string, {
        caPem: m.caPem as string,
        ...(m.admin as { certPem: string; keyPem: string }),
      });
      return { type: "connected" };
    case "enqueue":
      return enqueue(m);
    default:
      throw new Error(`unknown request ${m.type}`);
  }
});

/** One small command job, as a CI front end would send it. */
function job(workspaceId: string, n: number): Record<string, unknown> {
  return {
    apiVersion: "v1",
    workspaceId,
    labels: ["linux"],
    priority: n % 10,
    spec: { image: "busybox", argv: ["sh", "-c", `echo ${n}`], timeoutSeconds: 60 },
  };
}

/**
 * Enqueues `total` jobs as requests of `batchSize` (1: the single route), `inFlight` at a time;
 * every reply must be 200 with its jobs.
 */
async function enqueue(m: Message): Promise<Message> {
  const client = admin;
  if (!client) throw new Error("not connected");
  const total = m.total as number;
  const batchSize = m.batchSize as number;
  const inFlight = m.inFlight as number;
  const workspaceId = m.workspaceId as string;
  const requests = Math.ceil(total / batchSize);
  let next = 0;
  let stored = 0;
  const latencies: number[] = [];
  const started = nowMs();
  const worker = async () => {
    while (next < requests) {
      const r = next++;
      const count = Math.min(batchSize, total - r * batchSize);
      const jobs = Array.from({ length: count }, (_, i) => job(workspaceId, r * batchSize + i));
      const t0 = nowMs();
      const reply =
        batchSize === 1
          ? await client.post("/v1/admin/jobs", jobs[0])
          : await client.post("/v1/admin/jobs:batch", { apiVersion: "v1", jobs });
      latencies.push(nowMs() - t0);
      if (reply.status !== 200)
        throw new Error(
          `enqueue request ${r}: HTTP ${reply.status} ${JSON.stringify(reply.json).slice(0, 300)}`,
        );
      stored += batchSize === 1 ? (reply.json.job ? 1 : 0) : (reply.json.jobs as unknown[]).length;
    }
  };
  await Promise.all(Array.from({ length: Math.min(inFlight, requests) }, worker));
  return { type: "enqueued", seconds: (nowMs() - started) / 1000, stored, requests, latencies };
}
