// A client process for the connections scenario: holds many idle runner
// sessions (each its own certificate and HTTP/2 connection, registered), or
// measures full mTLS handshakes per second against a server. Run by
// bench/lib/fork.ts.
import { serveRequests, type Message } from "../lib/fork.js";
import { connectH2, connectRunner, type H2Client } from "../lib/h2.js";
import type { RunnerIdentity } from "../lib/pki.js";
import { nowMs } from "../lib/stats.js";

let held: H2Client[] = [];

serveRequests(async (m) => {
  switch (m.type) {
    case "open":
      return open(m);
    case "close-all":
      held.forEach((c) => c.close());
      held = [];
      return { type: "closed" };
    case "handshakes":
      return handshakes(m);
    default:
      throw new Error(`unknown request ${m.type}`);
  }
});

/** Runs `work` on every item with at most `concurrency` at once. */
async function pool<T>(
  items: readonly T[],
  concurrency: number,
  work: (item: T) => Promise<void>,
): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(concurrency, items.length) }, async () => {
      while (next < items.length) await work(items[next++]!);
    }),
  );
}

/** Connects and registers each identity, keeping the connection open and idle. */
async function open(m: Message): Promise<Message> {
  const identities = m.identities as RunnerIdentity[];
  const started = nowMs();
  await pool(identities, m.concurrency as number, async (id) => {
    held.push(await connectRunner(m.url as string, m.caPem as string, id));
  });
  return {
    type: "opened",
    held: held.length,
    elapsedMs: nowMs() - started,
    rssBytes: process.memoryUsage().rss,
  };
}

/**
 * For `durationMs`, `concurrency` loops each open a new connection (a full
 * TLS 1.3 handshake with a client certificate: no session is resumed), send
 * one GET `path`, and close it.
 */
async function handshakes(m: Message): Promise<Message> {
  const identities = m.identities as RunnerIdentity[];
  const durationMs = m.durationMs as number;
  const latencies: number[] = [];
  let failures = 0;
  let i = 0;
  const started = nowMs();
  await Promise.all(
    Array.from({ length: m.concurrency as number }, async () => {
      while (nowMs() - started < durationMs) {
        const id = identities[i++ % identities.length]!;
        const t0 = nowMs();
        try {
          const client = await connectH2(m.url as string, {
            caPem: m.caPem as string,
            certPem: id.certPem,
            keyPem: id.keyPem,
          });
          const reply = await client.get(m.path as string);
          client.close();
          if (reply.status !== 200) throw new Error(`HTTP ${reply.status}`);
          latencies.push(nowMs() - t0);
        } catch {
          failures++;
        }
      }
    }),
  );
  return {
    type: "handshakes",
    completed: latencies.length,
    failures,
    elapsedMs: nowMs() - started,
    latencies,
  };
}
