// A client process holding runner connections for the lease scenarios: each
// runner has its own certificate and HTTP/2 session, registers with one slot,
// then claims and completes through the REST routes, as `forelead runner`
// would, minus running anything. Run by bench/lib/fork.ts.
import { connectH2, connectRunner, type H2Client } from "../lib/h2.js";
import { serveRequests, type Message } from "../lib/fork.js";
import { epochMs, nowMs } from "../lib/stats.js";

/** A runner identity sent by the orchestrator. */
export interface RunnerSpec {
  readonly runnerId: string;
  readonly workspaceId: string;
  readonly certPem: string;
  readonly keyPem: string;
}

interface Runner {
  readonly spec: RunnerSpec;
  readonly client: H2Client;
}

let runners: Runner[] = [];
let admin: H2Client | undefined;

/** Bounds every operation: the benchmark stops by itself. */
const opDeadlineMs = 300_000;

serveRequests(async (m) => {
  switch (m.type) {
    case "connect":
      return connect(m);
    case "drain":
      return drain(m);
    case "pickup":
      return pickup(m);
    default:
      throw new Error(`unknown request ${m.type}`);
  }
});

async function connect(m: Message): Promise<Message> {
  const urls = m.urls as string[];
  const caPem = m.caPem as string;
  const specs = m.runners as RunnerSpec[];
  runners = await Promise.all(
    specs.map(async (spec, i) => {
      const client = await connectRunner(urls[i % urls.length]!, caPem, spec);
      return { spec, client };
    }),
  );
  const adminTls = m.admin as { certPem: string; keyPem: string } | undefined;
  if (adminTls) admin = await connectH2(urls[0]!, { caPem, ...adminTls });
  return { type: "connected", runners: runners.length };
}

/**
 * Every runner claims (no wait) and completes until a claim finds nothing,
 * or until `maxJobs` claims were made in all. Latencies are per request.
 * With `next` (complete-and-claim, CompleteRequest.next): each completion
 * also asks for the next lease (waitSeconds 0), and a runner claims only
 * when a completion brought none.
 */
async function drain(m: Message): Promise<Message> {
  const maxJobs = (m.maxJobs as number | undefined) ?? Infinity;
  const next = m.next === true;
  const claimMs: number[] = [];
  const completeMs: number[] = [];
  let claimed = 0;
  let completed = 0;
  const cpu0 = process.cpuUsage();
  const started = nowMs();
  const deadline = started + opDeadlineMs;
  await Promise.all(
    runners.map(async ({ spec, client }) => {
      let lease: { job: { id: string }; token: string } | undefined;
      while (claimed < maxJobs && nowMs() < deadline) {
        claimed++;
        let t1 = nowMs();
        if (!lease) {
          const t0 = t1;
          const claim = await client.post("/v1/runner/claim", {
            apiVersion: "v1",
            runnerId: spec.runnerId,
            waitSeconds: 0,
          });
          t1 = nowMs();
          if (claim.status === 204) {
            claimed--;
            return;
          }
          if (claim.status !== 200)
            throw new Error(`claim: HTTP ${claim.status} ${JSON.stringify(claim.json)}`);
          claimMs.push(t1 - t0);
          lease = claim.json;
        }
        const { job, token } = lease!;
        const done = await client.post("/v1/runner/complete", {
          apiVersion: "v1",
          jobId: job.id,
          leaseToken: token,
          completionId: `c-${job.id}`,
          outcome: "succeeded",
          exitCode: 0,
          next: next ? { waitSeconds: 0 } : undefined,
        });
        if (done.status !== 200)
          throw new Error(`complete: HTTP ${done.status} ${JSON.stringify(done.json)}`);
        completeMs.push(nowMs() - t1);
        completed++;
        lease = done.json.lease;
      }
      // maxJobs reached with a lease in hand (complete-and-claim): give it back.
      if (lease)
        await client.post("/v1/runner/release", {
          apiVersion: "v1",
          jobId: lease.job.id,
          leaseToken: lease.token,
        });
    }),
  );
  const elapsedMs = nowMs() - started;
  const cpu = process.cpuUsage(cpu0);
  return {
    type: "drained",
    completed,
    elapsedMs,
    claimMs,
    completeMs,
    cpuMs: (cpu.user + cpu.system) / 1000,
  };
}

/**
 * Pickup latency: every runner waits in a long-poll claim; meanwhile `total`
 * jobs are enqueued through the admin route at `ratePerSecond`, each sent at
 * its scheduled time whatever the previous one is doing (open loop). The
 * latency of a job is from sending its enqueue to its lease arriving. With
 * `next` (complete-and-claim), each completion also waits for the next lease
 * (CompleteRequest.next.waitSeconds 20), as the runner agent does, so a
 * runner makes one request a job instead of two.
 */
async function pickup(m: Message): Promise<Message> {
  const total = m.total as number;
  const ratePerSecond = m.ratePerSecond as number;
  const workspaceId = m.workspaceId as string;
  const next = m.next === true;
  if (!admin) throw new Error("connect with an admin identity first");
  const leasedAt = new Map<string, number>();
  // By enqueue order: when sent, when acknowledged, and the job id the reply named.
  const sentAt: number[] = [];
  const repliedAt: number[] = [];
  const jobIds: string[] = [];
  const completing = new Set<Promise<unknown>>();
  let stop = false;
  let allLeased: () => void = () => {};
  const everyLease = new Promise<void>((resolve) => (allLeased = resolve));
  const deadline = nowMs() + opDeadlineMs;
  const waitSeconds = 20;
  // The requests of a stopped run end when their connections close: not an error.
  const unlessStopped = (err: Error) => {
    if (stop) return undefined;
    throw err;
  };
  const loops = runners.map(async ({ spec, client }) => {
    let lease: { job: { id: string }; token: string } | undefined;
    while (!stop && nowMs() < deadline) {
      if (!lease) {
        const claim = await client
          .post("/v1/runner/claim", { apiVersion: "v1", runnerId: spec.runnerId, waitSeconds })
          .catch(unlessStopped);
        if (!claim || claim.status === 204) continue;
        if (claim.status !== 200)
          throw new Error(`claim: HTTP ${claim.status} ${JSON.stringify(claim.json)}`);
        lease = claim.json;
      }
      const { job, token } = lease!;
      leasedAt.set(job.id, epochMs());
      if (leasedAt.size >= total) allLeased();
      const completion = client.post("/v1/runner/complete", {
        apiVersion: "v1",
        jobId: job.id,
        leaseToken: token,
        completionId: `c-${job.id}`,
        outcome: "succeeded",
        exitCode: 0,
        next: next ? { waitSeconds } : undefined,
      });
      // A completion that also waits for the next lease is a long poll: the run does not wait for
      // it at its end.
      if (!next) completing.add(completion);
      const done = await completion
        .catch(unlessStopped)
        .finally(() => completing.delete(completion));
      if (!done) return;
      if (done.status !== 200)
        throw new Error(`complete: HTTP ${done.status} ${JSON.stringify(done.json)}`);
      // The next lease arrives with the completion's reply, when there is one by its wait's end.
      lease = next ? done.json.lease : undefined;
    }
  });
  const failed = Promise.all(loops).then(() => {
    if (!stop)
      throw new Error(`runners stopped before all ${total} jobs were leased (${leasedAt.size})`);
  });
  // Let every runner's first claim reach its wait before the first job.
  await new Promise((r) => setTimeout(r, m.settleMs as number));
  const start = nowMs();
  const enqueues: Array<Promise<void>> = [];
  for (let i = 0; i < total; i++) {
    const due = start + (i * 1000) / ratePerSecond;
    const wait = due - nowMs();
    if (wait > 1) await new Promise((r) => setTimeout(r, wait));
    sentAt[i] = epochMs();
    enqueues.push(
      admin
        .post("/v1/admin/jobs", {
          apiVersion: "v1",
          workspaceId,
          labels: ["linux"],
          spec: { image: "busybox", argv: ["true"] },
        })
        .then((reply) => {
          if (reply.status !== 200)
            throw new Error(`enqueue: HTTP ${reply.status} ${JSON.stringify(reply.json)}`);
          repliedAt[i] = epochMs();
          jobIds[i] = reply.json.job.id;
        }),
    );
  }
  const enqueueMs = nowMs() - start;
  await Promise.all(enqueues);
  await Promise.race([
    everyLease,
    failed,
    new Promise((_, reject) =>
      setTimeout(
        () => reject(new Error(`only ${leasedAt.size} of ${total} jobs leased in time`)),
        opDeadlineMs,
      ).unref(),
    ),
  ]);
  stop = true;
  // Let the last completions land before the connections (and the claims waiting on them) close.
  await Promise.allSettled([...completing]);
  for (const r of runners) r.client.close();
  runners = [];
  // In enqueue order: the distribution over the run shows a backlog building or draining.
  const latencies = sentAt.map((t0, i) => leasedAt.get(jobIds[i]!)! - t0);
  const enqueueLatencies = sentAt.map((t0, i) => repliedAt[i]! - t0);
  return { type: "picked-up", latencies, enqueueLatencies, enqueueMs };
}
