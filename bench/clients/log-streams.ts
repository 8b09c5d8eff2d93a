// A client process for the streams-ingest scenario: runners (own certificate
// and HTTP/2 connection each) that register and lease one job each, then
// send each lease's log lines, a bounded number per request, to a server:
// the control plane or the bare server, with the same code and so the same
// request bodies. Two transports: NDJSON through the runner's stream writer
// (src/runner/output/stream-writer.ts), and gRPC client streaming through a
// generated client. Run by bench/lib/fork.ts.
import { fromJson } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { RunnerService } from "../../gen/forelead/runner/v1/runner_pb.js";
import { createStreamWriter, lastAcceptedHeader } from "../../src/runner/output/stream-writer.js";
import type { NdjsonPost } from "../../src/runner/transport/ndjson-post.js";
import { createSessionPost } from "../../test/support/ndjson-post.js";
import { serveRequests, type Message } from "../lib/fork.js";
import { connectH2, connectRunner, type H2Client } from "../lib/h2.js";
import type { RunnerIdentity } from "../lib/pki.js";
import { nowMs } from "../lib/stats.js";

/** One leased job, as the claim returned it. */
interface Lease {
  readonly runnerId: string;
  readonly jobId: string;
  readonly token: string;
}

/** What one lease got through in a "send". */
export interface LeaseSent {
  readonly jobId: string;
  /** Lines the server acknowledged (2xx for every request that carried them). */
  readonly confirmed: number;
  /** Why the lease stopped early, when a request was refused. */
  readonly failure?: string;
}

/** The reply to "send". */
export interface SendResult extends Message {
  readonly type: "sent";
  readonly elapsedMs: number;
  readonly requests: number;
  /** NDJSON only: bytes of the request bodies (gRPC bodies are counted by the bare server). */
  readonly bodyBytes: number | null;
  /** Replies other than 2xx (the stream writer retries 429 and 5xx). */
  readonly refusedReplies: number;
  /** True when the time bound stopped some lease before all its lines were sent. */
  readonly cut: boolean;
  readonly leases: readonly LeaseSent[];
  readonly cpuMs: number;
}

let caPem = "";
let identities: RunnerIdentity[] = [];
let sessions: H2Client[] = [];
let leases: Lease[] = [];

serveRequests(async (m) => {
  switch (m.type) {
    case "connect":
      return connect(m);
    case "claim":
      return claim(m.count as number);
    case "send":
      return send(m);
    case "complete":
      return complete();
    default:
      throw new Error(`unknown request ${m.type}`);
  }
});

/** Connects and registers every runner with the control plane at `url`. */
async function connect(m: Message): Promise<Message> {
  caPem = m.caPem as string;
  identities = m.runners as RunnerIdentity[];
  sessions = await Promise.all(identities.map((id) => connectRunner(m.url as string, caPem, id)));
  return { type: "connected", runners: sessions.length };
}

/** The first `count` runners lease one job each. */
async function claim(count: number): Promise<Message> {
  leases = await Promise.all(
    identities.slice(0, count).map(async (id, i) => {
      const reply = await sessions[i]!.post("/v1/runner/claim", {
        apiVersion: "v1",
        runnerId: id.runnerId,
        waitSeconds: 0,
      });
      if (reply.status !== 200)
        throw new Error(`claim ${id.runnerId}: HTTP ${reply.status} ${JSON.stringify(reply.json)}`);
      return {
        runnerId: id.runnerId,
        jobId: reply.json.job.id as string,
        token: reply.json.token as string,
      };
    }),
  );
  return { type: "claimed", jobIds: leases.map((l) => l.jobId) };
}

/**
 * Completes every current lease, so its runner's slot is free for the next
 * cell. A lease already gone (404, 409) is counted, not thrown: the cell's
 * check reports the refused lines.
 */
async function complete(): Promise<Message> {
  let gone = 0;
  await Promise.all(
    leases.map(async (l, i) => {
      const reply = await sessions[i]!.post("/v1/runner/complete", {
        apiVersion: "v1",
        jobId: l.jobId,
        leaseToken: l.token,
        completionId: `c-${l.jobId}`,
        outcome: "succeeded",
        exitCode: 0,
      });
      if (reply.status === 404 || reply.status === 409) gone++;
      else if (reply.status !== 200)
        throw new Error(`complete ${l.jobId}: HTTP ${reply.status} ${JSON.stringify(reply.json)}`);
    }),
  );
  leases = [];
  return { type: "completed", gone };
}

/** The log line of `sequence`: exactly `bytes` bytes of ASCII, ending in a newline. */
function lineText(sequence: number, bytes: number): string {
  const head = `line ${sequence} `;
  return head + filler(bytes - head.length - 1) + "\n";
}
let fill = "";
function filler(n: number): string {
  if (fill.length < n) fill = "x".repeat(n);
  return fill.slice(0, n);
}

/**
 * Every current lease sends lines 1..linesPerLease to `url`, linesPerRequest
 * per request, one request in flight per lease, all leases at once; a lease
 * starts no request after `maxMs`. Connections are opened (TLS handshake
 * done) before the clock starts and closed after.
 */
async function send(m: Message): Promise<SendResult> {
  const url = m.url as string;
  const lineBytes = m.lineBytes as number;
  const linesPerLease = m.linesPerLease as number;
  const perRequest = m.linesPerRequest as number;
  const transport = m.transport as "ndjson" | "grpc";
  let requests = 0;
  let bodyBytes = 0;
  let refusedReplies = 0;
  let cut = false;
  const senders = await Promise.all(
    leases.map((lease) =>
      transport === "ndjson" ? ndjsonSender(url, lease) : grpcSender(url, lease),
    ),
  );
  const cpu0 = process.cpuUsage();
  const started = nowMs();
  const deadline = started + (m.maxMs as number);
  const sent = await Promise.all(
    senders.map(async (sender): Promise<LeaseSent> => {
      let confirmed = 0;
      try {
        for (let first = 1; first <= linesPerLease; first += perRequest) {
          if (nowMs() >= deadline) {
            cut = true;
            break;
          }
          const last = Math.min(linesPerLease, first + perRequest - 1);
          confirmed = await sender.send(first, last);
        }
        return { jobId: sender.jobId, confirmed };
      } catch (err) {
        return {
          jobId: sender.jobId,
          confirmed: sender.confirmed(),
          failure: (err as Error).message,
        };
      }
    }),
  );
  const elapsedMs = nowMs() - started;
  const cpu = process.cpuUsage(cpu0);
  senders.forEach((s) => s.close());
  return {
    type: "sent",
    elapsedMs,
    requests,
    bodyBytes: transport === "ndjson" ? bodyBytes : null,
    refusedReplies,
    cut,
    leases: sent,
    cpuMs: (cpu.user + cpu.system) / 1000,
  };

  /** One lease's lines, sent to one server. */
  interface Sender {
    readonly jobId: string;
    /** Sends lines first..last as one request; resolves with the lines confirmed so far. */
    send(first: number, last: number): Promise<number>;
    confirmed(): number;
    close(): void;
  }

  async function ndjsonSender(url: string, lease: Lease): Promise<Sender> {
    const id = identities.find((i) => i.runnerId === lease.runnerId)!;
    const client = await connectH2(url, { caPem, certPem: id.certPem, keyPem: id.keyPem });
    const sessionPost = createSessionPost(() => client.session);
    const post: NdjsonPost = async (path, body, timeoutMs) => {
      requests++;
      bodyBytes += Buffer.byteLength(body);
      const reply = await sessionPost(path, body, timeoutMs);
      if (reply.status < 200 || reply.status >= 300) refusedReplies++;
      return reply;
    };
    const writer = createStreamWriter("logs", {
      post,
      runnerId: lease.runnerId,
      jobId: lease.jobId,
      leaseToken: lease.token,
    });
    return {
      jobId: lease.jobId,
      async send(first, last) {
        // Written together, the lines go out in one request (under the writer's byte bound).
        for (let s = first; s <= last; s++)
          writer.write({ stream: "stdout", text: lineText(s, lineBytes) });
        await writer.flush();
        return writer.confirmed;
      },
      confirmed: () => writer.confirmed,
      close: () => client.close(),
    };
  }

  async function grpcSender(url: string, lease: Lease): Promise<Sender> {
    const id = identities.find((i) => i.runnerId === lease.runnerId)!;
    const sessionManager = new Http2SessionManager(url, undefined, {
      ca: caPem,
      cert: id.certPem,
      key: id.keyPem,
    });
    if ((await sessionManager.connect()) === "error")
      throw new Error(`gRPC connection to ${url}: ${String(sessionManager.error())}`);
    const client = createClient(
      RunnerService,
      createGrpcTransport({ baseUrl: url, sessionManager }),
    );
    const fields = {
      apiVersion: "v1",
      runnerId: lease.runnerId,
      jobId: lease.jobId,
      leaseToken: lease.token,
    };
    let confirmed = 0;
    async function* messages(first: number, last: number) {
      for (let s = first; s <= last; s++)
        yield {
          ...fields,
          sequence: BigInt(s),
          data: fromJson(ValueSchema, { stream: "stdout", text: lineText(s, lineBytes) }),
        };
    }
    return {
      jobId: lease.jobId,
      async send(first, last) {
        requests++;
        try {
          await client.logs(messages(first, last));
        } catch (err) {
          refusedReplies++;
          const e = ConnectError.from(err);
          const stored = Number(e.metadata.get(lastAcceptedHeader) ?? confirmed);
          confirmed = Math.max(confirmed, stored);
          throw new Error(`lines ${first}..${last}: ${e.message}`, { cause: err });
        }
        confirmed = last;
        return confirmed;
      },
      confirmed: () => confirmed,
      close: () => sessionManager.abort(),
    };
  }
}
