import "reflect-metadata";
import { describe, expect, it } from "vitest";
import { lastAcceptedHeader } from "../../src/runner/output/stream-writer.js";
import { createRunnerClient } from "../../src/runner/transport/client.js";
import type { NdjsonPost, NdjsonReply } from "../../src/runner/transport/ndjson-post.js";
import { createRestTransport } from "../../src/runner/transport/rest-transport.js";
import { leasedJob, type LeasedJob } from "../support/actors.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";
import { createLeaseStreams, expireLease, readSequences } from "../support/streams.js";

// The control plane's body bound is made small (16 KiB), so the writer's own
// bound (1 MB) is too big and the server cuts its requests with 413: the
// writer must resume from the sequence the server reports.
const cp = useControlPlane({ maxBodyBytes: 16 * 1024 });
const { admin } = cp;
let n = 0;

/** One post as the writer made it, and what came of it. */
interface Posted {
  readonly path: string;
  readonly first: number;
  readonly last: number;
  readonly status: number | "lost";
  readonly lastAccepted?: string;
}

/**
 * Wraps the post the shipped runner makes (RunnerClient.postNdjson on its REST transport: one
 * HTTP/2 connection, as cli/runner.ts builds it) to record every request.
 */
async function recordingPost(
  leased: LeasedJob,
  around?: (path: string, send: () => Promise<NdjsonReply>) => Promise<NdjsonReply>,
): Promise<{ post: NdjsonPost; posted: Posted[]; close: () => Promise<void> }> {
  const cert = await cp.pki.runner("r1", leased.workspaceId);
  const tls = () => ({ ca: cp.pki.ca.certPem, cert: cert.certPem, key: cert.keyPem });
  const client = createRunnerClient(createRestTransport(cp.url, tls), "r1", leased.workspaceId);
  const real = client.postNdjson;
  const posted: Posted[] = [];
  const post: NdjsonPost = async (path, body, timeoutMs) => {
    const sequences = body
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l).sequence as number);
    const record = (status: number | "lost", reply?: NdjsonReply) => {
      const header = reply?.headers[lastAcceptedHeader];
      posted.push({
        path,
        first: sequences[0]!,
        last: sequences[sequences.length - 1]!,
        status,
        lastAccepted: typeof header === "string" ? header : undefined,
      });
    };
    try {
      const reply = await (around
        ? around(path, () => real(path, body, timeoutMs))
        : real(path, body, timeoutMs));
      record(reply.status, reply);
      return reply;
    } catch (err) {
      record("lost");
      throw err;
    }
  };
  return { post, posted, close: () => client.close() };
}

const leased = () => leasedJob(cp, admin, "r1", `sw${++n}`);
const writerOptions = (l: LeasedJob, post: NdjsonPost) => ({
  post,
  runnerId: "r1",
  jobId: l.jobId,
  leaseToken: l.token,
  backoffMs: 10,
});
const range = (from: number, to: number) =>
  Array.from({ length: to - from + 1 }, (_, i) => from + i);

describe(`the runner's stream writer against the real server (${databaseKind})`, () => {
  it(
    "keeps events and logs concurrent on one connection, and resumes from " +
      "the reported sequence when the server cuts a request",
    async () => {
      const l = await leased();
      // The first logs request is held until an events request is in flight too: with one
      // stream waiting for the other this would never finish.
      let eventsInFlight!: () => void;
      const eventsStarted = new Promise<void>((resolve) => (eventsInFlight = resolve));
      let held = false;
      const { post, posted, close } = await recordingPost(l, async (path, send) => {
        if (path.endsWith("/events")) {
          eventsInFlight();
          return send();
        }
        if (!held) {
          held = true;
          await eventsStarted;
        }
        return send();
      });
      const streams = createLeaseStreams(writerOptions(l, post));
      for (let i = 1; i <= 2000; i++) {
        streams.logs.write({ stream: "stdout", text: `line ${i} ${"x".repeat(40)}\n` });
        if (i % 20 === 0) streams.events.write({ type: "progress", done: i });
      }
      await streams.flush();
      expect(await readSequences(admin, l.jobId)).toEqual(range(1, 2000));
      expect(await readSequences(admin, l.jobId, "events")).toEqual(range(1, 100));
      expect(streams.logs.confirmed).toBe(2000);

      // Requests over the server's 16 KiB bound were cut (413); each next request began right after
      // the reported sequence.
      const logs = posted.filter((p) => p.path.endsWith("/logs"));
      const cut = logs.filter((p) => p.status === 413);
      expect(cut.length).toBeGreaterThan(0);
      for (let i = 1; i < logs.length; i++) {
        const before = logs[i - 1]!;
        const expectedFirst =
          before.status === 204 ? before.last + 1 : Number(before.lastAccepted) + 1;
        expect(logs[i]!.first, JSON.stringify(logs.slice(i - 1, i + 1))).toBe(expectedFirst);
      }
      await close();
      await l.runner.close();
    },
  );

  it(
    "resumes after a reply lost on the way: the resent lines are refused as " +
      "repeats, naming how far the server got",
    async () => {
      const l = await leased();
      let lost = false;
      const { post, posted, close } = await recordingPost(l, async (_path, send) => {
        const reply = await send();
        if (!lost && reply.status === 204) {
          lost = true;
          // the writer never sees this 204
          throw new Error("connection reset after the request was stored");
        }
        return reply;
      });
      const { logs } = createLeaseStreams(writerOptions(l, post));
      for (let i = 1; i <= 50; i++) logs.write(`line ${i}\n`);
      await logs.flush();
      for (let i = 51; i <= 60; i++) logs.write(`line ${i}\n`);
      await logs.flush();
      expect(await readSequences(admin, l.jobId)).toEqual(range(1, 60));
      const [first, resent] = posted;
      expect(first).toMatchObject({ first: 1, status: "lost" });
      expect(resent).toMatchObject({ first: 1, status: 409, lastAccepted: String(first!.last) });
      expect(posted.slice(2).every((p) => p.status === 204 || p.status === 413)).toBe(true);
      await close();
      await l.runner.close();
    },
  );

  it("stops with the server's reason when the lease is gone, and refuses further writes", async () => {
    const l = await leased();
    const { post, close } = await recordingPost(l);
    const { logs } = createLeaseStreams(writerOptions(l, post));
    logs.write("before\n");
    await logs.flush();
    await expireLease(cp, l.jobId);
    logs.write("after\n");
    await expect(logs.flush()).rejects.toThrow(
      /logs: the control plane refused sequence 2: 409 .*expired at .*; last accepted logs sequence for this lease is 1/,
    );
    expect(() => logs.write("more\n")).toThrow(/refused sequence 2/);
    expect(await readSequences(admin, l.jobId)).toEqual([1]);
    await close();
    await l.runner.close();
  });
});
