import { describe, expect, it } from "vitest";
import { createControlPlaneOutput } from "../../src/runner/output/control-plane-output.js";
import { lastAcceptedHeader } from "../../src/runner/output/stream-writer.js";
import type { NdjsonReply } from "../../src/runner/transport/ndjson-post.js";
import { TransportError } from "../../src/runner/transport/rest-transport.js";

/**
 * A control plane's stream routes as the sink sees them: each POST answered by `answer`, every body
 * kept.
 */
function streamRoutes(
  answer: (path: string, lines: unknown[], call: number) => NdjsonReply | Error,
) {
  const posts: Array<{ path: string; lines: Array<Record<string, unknown>> }> = [];
  let calls = 0;
  const client = {
    runnerId: "r1",
    async postNdjson(path: string, body: string) {
      const parsed = body
        .split("\n")
        .filter(Boolean)
        .map((l) => JSON.parse(l) as Record<string, unknown>);
      posts.push({ path, lines: parsed });
      const reply = answer(path, parsed, ++calls);
      if (reply instanceof Error) throw reply;
      return reply;
    },
  };
  return { client, posts };
}
const ok: NdjsonReply = { status: 204, headers: {}, text: "" };
const reply = (
  status: number,
  code: string,
  message: string,
  lastAccepted?: number,
): NdjsonReply => ({
  status,
  headers: lastAccepted !== undefined ? { [lastAcceptedHeader]: String(lastAccepted) } : {},
  text: JSON.stringify({ code, message }),
});

describe("the control-plane output sink", () => {
  it("sends each stream as NDJSON messages with its own increasing sequence, the lease and the runner", async () => {
    const { client, posts } = streamRoutes(() => ok);
    const out = createControlPlaneOutput(client, { warn: () => {} }).open({
      jobId: "j1",
      leaseToken: "tok",
    });
    out.event({ type: "job.started" });
    for (let i = 1; i <= 3; i++) out.log({ stream: "stdout", text: `line ${i}` });
    out.event({ type: "job.exited", exitCode: 0 });
    await out.flush();
    const sent = (path: string) => posts.filter((p) => p.path === path).flatMap((p) => p.lines);
    expect(sent("/v1/runner/logs")).toEqual(
      [1, 2, 3].map((i) => ({
        apiVersion: "v1",
        runnerId: "r1",
        jobId: "j1",
        leaseToken: "tok",
        sequence: i,
        data: { stream: "stdout", text: `line ${i}` },
      })),
    );
    expect(
      sent("/v1/runner/events").map((m) => [m.sequence, (m.data as { type: string }).type]),
    ).toEqual([
      [1, "job.started"],
      [2, "job.exited"],
    ]);
  });

  it(
    "a 501 (the control plane does not store the stream yet) is warned about " +
      "once, and writing goes on without error",
    async () => {
      const warnings: string[] = [];
      const { client } = streamRoutes(() =>
        reply(501, "unimplemented", "logs is not served by this control plane yet"),
      );
      const sink = createControlPlaneOutput(client, { warn: (m) => warnings.push(m) });
      for (const jobId of ["j1", "j2"]) {
        const out = sink.open({ jobId, leaseToken: "tok" });
        out.log({ stream: "stdout", text: "x" });
        out.event({ type: "job.started" });
        await out.flush();
        out.log({ stream: "stdout", text: "after" });
        await out.flush();
      }
      expect(warnings.filter((w) => w.includes("does not store job logs yet"))).toHaveLength(1);
      expect(warnings.filter((w) => w.includes("does not store job events yet"))).toHaveLength(1);
    },
  );

  it(
    "a transport failure is retried with the same sequences; a refusal " +
      "naming the last accepted sequence resumes after it",
    async () => {
      const { client, posts } = streamRoutes((_path, _lines, call) => {
        if (call === 1) return new TransportError("connection reset");
        if (call === 2)
          return reply(
            409,
            "aborted",
            "sequence 1 repeats; last accepted logs sequence for this lease is 1",
            1,
          );
        return ok;
      });
      const out = createControlPlaneOutput(client, { warn: () => {}, backoffMs: 1 }).open({
        jobId: "j1",
        leaseToken: "tok",
      });
      out.log({ stream: "stdout", text: "a" });
      out.log({ stream: "stdout", text: "b" });
      await out.flush();
      expect(posts.map((p) => p.lines.map((l) => l.sequence))).toEqual([[1, 2], [1, 2], [2]]);
    },
  );

  it("a lease that is gone (409 without a sequence) stops the stream; flush does not wait for it", async () => {
    const { client, posts } = streamRoutes(() =>
      reply(409, "aborted", "the lease on job j1 expired at 2026-01-01T00:00:00Z"),
    );
    const out = createControlPlaneOutput(client, { warn: () => {} }).open({
      jobId: "j1",
      leaseToken: "tok",
    });
    out.log({ stream: "stdout", text: "a" });
    await out.flush();
    out.log({ stream: "stdout", text: "b" });
    await out.flush();
    expect(posts).toHaveLength(1);
  });

  it(
    "while the control plane is unreachable, each stream holds at most " +
      "maxPending lines (the oldest are dropped) and flush gives up after its " +
      "timeout",
    async () => {
      const warnings: string[] = [];
      const { client, posts } = streamRoutes(() => new TransportError("connection refused"));
      const out = createControlPlaneOutput(client, {
        warn: (m) => warnings.push(m),
        maxPending: 3,
        flushTimeoutMs: 50,
        backoffMs: 1,
      }).open({ jobId: "j1", leaseToken: "tok" });
      for (let i = 1; i <= 5; i++) out.log({ stream: "stdout", text: `line ${i}` });
      await out.flush();
      expect(posts[0]!.lines.map((l) => l.sequence)).toEqual([3, 4, 5]);
      expect(warnings.filter((w) => w.includes("dropping the oldest"))).toHaveLength(1);
      expect(
        warnings.filter((w) =>
          w.includes("3 logs not delivered within 50 ms; completing without them"),
        ),
      ).toHaveLength(1);
    },
  );
});
