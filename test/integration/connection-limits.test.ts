import "reflect-metadata";
import net from "node:net";
import tls from "node:tls";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { adminActor, eventually, leasedJob, registeredRunner } from "../support/actors.js";
import { startTestControlPlane, type TestControlPlane } from "../support/control-plane.js";
import { useControlPlane } from "../support/fixture.js";
import {
  clientPreface,
  createFrameReader,
  frameBytes,
  frameType,
  hpackLiterals,
  replyEnding,
  strictRequest,
  tappedSession,
} from "../support/h2-frames.js";
import { readEventStream } from "../support/ndjson.js";

// Tight bounds, so each limit shows within a test's time; the defaults are in
// src/server/connection-limits.ts.
const bodyIdleMs = 1_000;
const handshakeTimeoutMs = 1_000;
const slackMs = 4_000;
const cp = useControlPlane({
  connectionLimits: { bodyIdleMs, handshakeTimeoutMs },
  streamMaxSeconds: 3,
});
const { admin } = cp;
const lastAccepted = "forelead-last-accepted-sequence";
let n = 0;
const lease = () => leasedJob(cp, admin, `cl${++n}`, `cw${n}`);
const ndjsonHeaders = {
  ":method": "POST",
  ":path": "/v1/runner/logs",
  "content-type": "application/x-ndjson",
};
const line = (m: Record<string, unknown>) => `${JSON.stringify(m)}\n`;

describe("replies every client can read: END_STREAM before any reset", () => {
  it(
    "each refusal, before the body or part way through an NDJSON stream, " +
      "ends its stream before any reset",
    async () => {
      const { runner, msg, jobId } = await lease();
      const runnerCert = await cp.pki.runner(runner.runnerId, `cw${n}`);
      const certless = tappedSession(cp.url, cp.pki.ca.certPem);
      const withCert = tappedSession(cp.url, cp.pki.ca.certPem, runnerCert);
      const open = { keepOpen: true };
      const cases = [
        {
          name: "no certificate, body unsent",
          s: certless,
          headers: {
            ":method": "POST",
            ":path": "/v1/runner/claim",
            "content-type": "application/json",
          },
          body: ["{"],
          ...open,
          status: 401,
        },
        {
          name: "no route, body unsent",
          s: withCert,
          headers: { ":method": "POST", ":path": "/v1/nowhere" },
          body: ["{"],
          ...open,
          status: 404,
        },
        {
          name: "wrong method, body unsent",
          s: withCert,
          headers: { ":method": "PUT", ":path": "/v1/runner/claim" },
          body: ["{"],
          ...open,
          status: 405,
        },
        {
          name: "NDJSON 400 (bad line)",
          s: withCert,
          headers: ndjsonHeaders,
          body: [line(msg(1, "a")), "not json\n"],
          ...open,
          status: 400,
          last: "1",
        },
        {
          name: "NDJSON 404 (unknown job)",
          s: withCert,
          headers: ndjsonHeaders,
          body: [line({ ...msg(1, "a"), jobId: "00000000-0000-4000-8000-000000000000" })],
          ...open,
          status: 404,
        },
        {
          name: "NDJSON 409 (repeated sequence)",
          s: withCert,
          headers: ndjsonHeaders,
          body: [line(msg(2, "b")), line(msg(2, "b"))],
          ...open,
          status: 409,
          last: "2",
        },
        {
          name: "NDJSON 413 (body over 1 MiB)",
          s: withCert,
          headers: ndjsonHeaders,
          body: [line(msg(3, "c")), line(msg(4, "x".repeat(1 << 20)))],
          ...open,
          status: 413,
          last: "3",
        },
      ];
      for (const c of cases) {
        const reply = await strictRequest(c.s.session, c.headers, c.body, c.keepOpen);
        expect(reply.status, `${c.name}: ${reply.text}`).toBe(c.status);
        if ("last" in c) expect(reply.headers[lastAccepted], c.name).toBe(c.last);
        expect(replyEnding(c.s.frames, reply.streamId), c.name).toMatchObject({
          endStream: true,
          resetBeforeEnd: false,
        });
      }
      // 504: a stream that keeps making progress but stays open past the server's bound (3 s).
      const slow = withCert.session.request(ndjsonHeaders);
      let seq = 10;
      const drip = setInterval(() => slow.write(line(msg(seq++, "y".repeat(2048)))), 300);
      const ended = new Promise<void>((resolve) => slow.once("close", () => resolve()));
      let headers: Record<string, unknown> = {};
      slow.on("response", (h) => (headers = h));
      slow.on("error", () => {});
      slow.resume();
      await ended;
      clearInterval(drip);
      expect(headers[":status"]).toBe(504);
      expect(Number(headers[lastAccepted])).toBeGreaterThanOrEqual(10);
      expect(replyEnding(withCert.frames, slow.id!)).toMatchObject({
        endStream: true,
        resetBeforeEnd: false,
      });
      void jobId;
      certless.session.destroy();
      withCert.session.destroy();
    },
  );
});

describe("bounded connections", () => {
  it(
    "a body that makes no progress is ended with 408: what arrived is stored " +
      "and the header names the last accepted sequence",
    async () => {
      const { runner, msg, jobId } = await lease();
      const tapped = tappedSession(
        cp.url,
        cp.pki.ca.certPem,
        await cp.pki.runner(runner.runnerId, `cw${n}`),
      );
      const before = cp.plane.connections.stalledBodies;
      const reply = await strictRequest(
        tapped.session,
        ndjsonHeaders,
        [line(msg(1, "one")), line(msg(2, "two")), '{"apiVe'],
        true,
      );
      expect(reply.status, reply.text).toBe(408);
      expect(reply.headers[lastAccepted]).toBe("2");
      expect(JSON.parse(reply.text).code).toBe("deadline_exceeded");
      expect(replyEnding(tapped.frames, reply.streamId)).toMatchObject({
        endStream: true,
        resetBeforeEnd: false,
      });
      expect(cp.plane.connections.stalledBodies).toBe(before + 1);
      const logs = await admin.rest.request("GET", `/v1/admin/jobs/${jobId}/logs`);
      expect(
        logs.text
          .split("\n")
          .filter(Boolean)
          .map((l) => JSON.parse(l).sequence),
      ).toEqual(["1", "2"]);
      // A JSON body dripped a byte at a time is no progress either.
      const drip = tapped.session.request({
        ":method": "POST",
        ":path": "/v1/runner/claim",
        "content-type": "application/json",
      });
      const dripper = setInterval(() => drip.write(" "), 100);
      const status = await new Promise<number>((resolve) =>
        drip.on("response", (h) => resolve(Number(h[":status"]))),
      );
      clearInterval(dripper);
      expect(status).toBe(408);
      tapped.session.destroy();
    },
  );

  it("an NDJSON stream sending one small complete line per window is progress, not a stall", async () => {
    const { runner, msg, jobId } = await lease();
    const tapped = tappedSession(
      cp.url,
      cp.pki.ca.certPem,
      await cp.pki.runner(runner.runnerId, `cw${n}`),
    );
    const before = cp.plane.connections.stalledBodies;
    const stream = tapped.session.request(ndjsonHeaders);
    const status = new Promise<number>((resolve) =>
      stream.on("response", (h) => resolve(Number(h[":status"]))),
    );
    stream.on("error", () => {});
    stream.resume();
    // Lines well under 1 KiB, one every 0.6 windows, for more than two windows; then the end.
    for (let seq = 1; seq <= 4; seq++) {
      stream.write(line(msg(seq, `line ${seq}\n`)));
      await new Promise((r) => setTimeout(r, bodyIdleMs * 0.6));
    }
    stream.end();
    expect(await status).toBe(204);
    expect(cp.plane.connections.stalledBodies).toBe(before);
    const logs = await admin.rest.request("GET", `/v1/admin/jobs/${jobId}/logs`);
    expect(
      logs.text
        .split("\n")
        .filter(Boolean)
        .map((l) => JSON.parse(l).sequence),
    ).toEqual(["1", "2", "3", "4"]);
    tapped.session.destroy();
  });

  it(
    "10,000 unfinished bodies from a certificate-less client are cut or " +
      "refused within the bound; RSS stays within budget; a runner is served " +
      "throughout",
    async () => {
      const runner = await registeredRunner(cp, "steady", "cw-steady");
      const rssBefore = process.memoryUsage().rss;
      let rssPeak = rssBefore;
      const served: number[] = [];
      let flooding = true;
      const steady = (async () => {
        while (flooding) {
          const t = Date.now();
          const r = await runner.claim({ waitSeconds: 0 });
          served.push(r.status === 204 || r.status === 200 ? Date.now() - t : -r.status);
          rssPeak = Math.max(rssPeak, process.memoryUsage().rss);
          await new Promise((r) => setTimeout(r, 100));
        }
      })();
      const { port } = new URL(cp.url);
      const connections = 10;
      const perConnection = 1_000;
      const started = Date.now();
      const outcomes = await Promise.all(
        Array.from(
          { length: connections },
          () =>
            new Promise<{
              answered: Map<number, number>;
              reset: number;
              cutAt: number;
              unaccounted: number;
            }>((resolve) => {
              const answered = new Map<number, number>();
              const reset = new Set<number>();
              const socket = tls.connect({
                host: "127.0.0.1",
                port: Number(port),
                ca: cp.pki.ca.certPem,
                ALPNProtocols: ["h2"],
              });
              let closed = false;
              const read = createFrameReader((f, payload) => {
                if (f.type === frameType.settings && (f.flags & 1) === 0)
                  socket.write(frameBytes(frameType.settings, 1, 0));
                if (f.type === frameType.headers) answered.set(f.streamId, Date.now() - started);
                if (f.type === frameType.rstStream) reset.add(f.streamId);
                void payload;
                if (
                  answered.size + [...reset].filter((id) => !answered.has(id)).length >=
                    perConnection &&
                  !closed
                )
                  socket.destroy();
              });
              socket.on("data", read);
              socket.on("error", () => {});
              socket.once("secureConnect", () => {
                const frames: Buffer[] = [clientPreface];
                for (let i = 0; i < perConnection; i++) {
                  const id = 2 * i + 1;
                  const headers = hpackLiterals([
                    [":method", "POST"],
                    [":scheme", "https"],
                    [":path", "/v1/enroll"],
                    [":authority", "127.0.0.1"],
                    ["content-type", "application/json"],
                  ]);
                  frames.push(
                    frameBytes(frameType.headers, 0x4, id, headers),
                    frameBytes(frameType.data, 0, id, Buffer.from('{"grant":')),
                  );
                }
                socket.write(Buffer.concat(frames));
              });
              const bound = setTimeout(() => socket.destroy(), bodyIdleMs + 2 * slackMs);
              socket.once("close", () => {
                closed = true;
                clearTimeout(bound);
                const ids = Array.from({ length: perConnection }, (_, i) => 2 * i + 1);
                const unaccounted = ids.filter((id) => !answered.has(id) && !reset.has(id)).length;
                resolve({ answered, reset: reset.size, cutAt: Date.now() - started, unaccounted });
              });
            }),
        ),
      );
      flooding = false;
      await steady;
      const rssAfter = process.memoryUsage().rss;
      const mib = (b: number) => Math.round(b / 2 ** 20);
      console.log(
        `10,000 unfinished bodies: RSS ${mib(rssBefore)} -> peak ${mib(rssPeak)} ` +
          `-> ${mib(rssAfter)} MiB; connections done after ` +
          `${outcomes.map((o) => o.cutAt).join(", ")} ms; answered ` +
          `${outcomes.map((o) => o.answered.size).join(",")}; reset ` +
          `${outcomes.map((o) => o.reset).join(",")}; unaccounted ` +
          `${outcomes.map((o) => o.unaccounted).join(",")}; runner served ` +
          `${served.length}, slowest ${Math.max(...served)} ms`,
      );
      for (const o of outcomes) {
        // Each stream was answered (408 at most a few per connection) or refused; or the connection
        // was cut.
        expect(o.answered.size).toBeLessThanOrEqual(4);
        expect(o.cutAt).toBeLessThan(bodyIdleMs + slackMs);
        for (const at of o.answered.values()) expect(at).toBeLessThan(bodyIdleMs + slackMs);
      }
      expect(rssPeak - rssBefore, "RSS budget: 96 MiB over the start").toBeLessThan(96 * 2 ** 20);
      expect(served.length).toBeGreaterThan(0);
      expect(
        served.every((ms) => ms >= 0 && ms < 5_000),
        served.join(","),
      ).toBe(true);
      await runner.close();
    },
  );

  it("a TLS handshake dripped a byte at a time is closed within the bound", async () => {
    const { port } = new URL(cp.url);
    const before = cp.plane.connections.handshakeTimeouts;
    const started = Date.now();
    const socket = net.connect(Number(port), "127.0.0.1");
    socket.on("error", () => {});
    const hello = Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03]);
    let i = 0;
    const drip = setInterval(() => i < hello.length && socket.write(hello.subarray(i, ++i)), 200);
    await new Promise<void>((resolve) => socket.once("close", () => resolve()));
    clearInterval(drip);
    expect(Date.now() - started).toBeLessThan(handshakeTimeoutMs + slackMs);
    expect(cp.plane.connections.handshakeTimeouts).toBe(before + 1);
  });

  it("a client that resets its request is counted, not logged as an internal error", async () => {
    const errors = vi.spyOn(console, "error");
    const before = cp.plane.connections.prematureCloses;
    // Raw frames: a node client's close() ends the body (END_STREAM) before its reset.
    const cert = await cp.pki.service("test-admin");
    const { port } = new URL(cp.url);
    const socket = tls.connect({
      host: "127.0.0.1",
      port: Number(port),
      ca: cp.pki.ca.certPem,
      cert: cert.certPem,
      key: cert.keyPem,
      ALPNProtocols: ["h2"],
    });
    socket.on("error", () => {});
    socket.on("data", () => {});
    await new Promise((r) => socket.once("secureConnect", r));
    const headers = hpackLiterals([
      [":method", "POST"],
      [":scheme", "https"],
      [":path", "/v1/admin/jobs"],
      [":authority", "127.0.0.1"],
      ["content-type", "application/json"],
    ]);
    const frames: Buffer[] = [clientPreface];
    for (let id = 1; id <= 9; id += 2)
      frames.push(
        frameBytes(frameType.headers, 0x4, id, headers),
        frameBytes(frameType.data, 0, id, Buffer.from('{"apiVersion":')),
      );
    socket.write(Buffer.concat(frames));
    await new Promise((r) => setTimeout(r, 200));
    const cancel = Buffer.alloc(4);
    cancel.writeUInt32BE(0x8);
    for (let id = 1; id <= 9; id += 2) socket.write(frameBytes(frameType.rstStream, 0, id, cancel));
    await eventually("the resets counted", async () =>
      cp.plane.connections.prematureCloses >= before + 5 ? true : undefined,
    );
    expect(errors.mock.calls.filter((c) => String(c[0]).includes("error ")).length).toBe(0);
    errors.mockRestore();
    socket.destroy();
  });
});

describe("bounds that leave long requests alone", () => {
  let cp2: TestControlPlane;
  beforeAll(async () => {
    cp2 = await startTestControlPlane({
      connectionLimits: { bodyIdleMs, idleConnectionMs: 1_000, maxConnectionsPerAddress: 6 },
    });
  });
  afterAll(() => cp2?.close());

  it(
    "a long-poll claim and a log follow outlast the body and idle bounds; an " +
      "idle connection is closed; connections past the per-address cap are " +
      "refused",
    async () => {
      const admin2 = await adminActor(cp2);
      const { runner, jobId, msg, token } = await leasedJob(cp2, admin2, "lp1", "lw1");
      // A follow stays open with no body and no new entry for longer than both bounds.
      const events: string[] = [];
      const follow = readEventStream(admin2.rest, `/v1/admin/jobs/${jobId}/logs?follow=true`, (e) =>
        events.push(e.event),
      );
      expect(await follow.status).toBe(200);
      const claim = runner.claim({ waitSeconds: 3 });
      const claimed = await claim;
      // waited the whole 3 s: nothing to claim, not cut
      expect(claimed.status, claimed.text).toBe(204);
      expect((await runner.rest.ndjson("/v1/runner/logs", [msg(1, "late line\n")])).status).toBe(
        204,
      );
      expect((await runner.complete(jobId, token)).status).toBe(200);
      await follow.done;
      expect(events).toEqual(["message", "end"]);

      // The admin's connection, now without streams, is closed after the idle bound.
      const idleBefore = cp2.plane.connections.idleConnectionsClosed;
      await eventually(
        "the idle connection closed",
        async () =>
          admin2.rest.session.closed || admin2.rest.session.destroyed ? true : undefined,
        1_000 + slackMs,
      );
      expect(cp2.plane.connections.idleConnectionsClosed).toBeGreaterThan(idleBefore);

      // Six connections from 127.0.0.1 at most.
      const { port } = new URL(cp2.url);
      await eventually(
        "the runner's idle connection closed too",
        async () =>
          runner.rest.session.closed || runner.rest.session.destroyed ? true : undefined,
        1_000 + slackMs,
      );
      const held = Array.from({ length: 6 }, () =>
        net.connect(Number(port), "127.0.0.1").on("error", () => {}),
      );
      await Promise.all(held.map((s) => new Promise((r) => s.once("connect", r))));
      const refusedBefore = cp2.plane.connections.refusedConnections;
      const extra = net.connect(Number(port), "127.0.0.1").on("error", () => {});
      await new Promise<void>((resolve) => extra.once("close", () => resolve()));
      expect(cp2.plane.connections.refusedConnections).toBe(refusedBefore + 1);
      held.forEach((s) => s.destroy());
      await runner.close();
    },
  );
});
