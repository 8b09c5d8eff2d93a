import "reflect-metadata";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fromJson } from "@bufbuild/protobuf";
import { sql } from "kysely";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import { RunnerService } from "../../gen/forelead/runner/v1/runner_pb.js";
import { adminActor, eventually, leasedJob as lease, type AdminActor } from "../support/actors.js";
import { createTestClient, rpcProtocols } from "../support/clients.js";
import { startTestControlPlane, type TestControlPlane } from "../support/control-plane.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";
import { openNdjson } from "../support/ndjson.js";
import { expireLease as expire, logLines, readEntries, readSequences } from "../support/streams.js";
import { hashLeaseToken } from "../../src/broker/ids.js";
import { appendBatches, createAppender, type AppendBatch } from "../../src/streams/append.js";

const cp = useControlPlane();
const { admin } = cp;
let n = 0;
const freshWorkspace = () => `st${++n}`;
const lastAccepted = "forelead-last-accepted-sequence";

const leasedJob = (runnerId = "r1", ws = freshWorkspace()) => lease(cp, admin, runnerId, ws);
const entries = (jobId: string, stream: "logs" | "events" = "logs") =>
  readEntries(admin, jobId, stream);
const sequences = (jobId: string, stream: "logs" | "events" = "logs") =>
  readSequences(admin, jobId, stream);
const expireLease = (jobId: string) => expire(cp, jobId);

describe(`events and logs over REST (${databaseKind})`, () => {
  it("the happy path: NDJSON in, 204, every message stored in order and readable as NDJSON and text", async () => {
    const { runner, jobId, msg } = await leasedJob();
    const logs = await runner.rest.ndjson("/v1/runner/logs", [
      msg(1, "hello\n"),
      msg(2, { stream: "stderr", text: "oops\n" }),
      msg(5, "after a gap\n"),
      msg(6, { stream: "stdout", text: "a line as the runner agent sends it" }),
    ]);
    expect(logs.status, logs.text).toBe(204);
    const events = await runner.rest.ndjson("/v1/runner/events", [
      msg(1, { type: "job.started" }),
      msg(2, { type: "job.exited", exitCode: 0 }),
    ]);
    expect(events.status, events.text).toBe(204);

    const read = await entries(jobId);
    expect(read.map(({ sequence, attempt, data }) => ({ sequence, attempt, data }))).toEqual([
      { sequence: "1", attempt: 1, data: "hello\n" },
      { sequence: "2", attempt: 1, data: { stream: "stderr", text: "oops\n" } },
      { sequence: "5", attempt: 1, data: "after a gap\n" },
      {
        sequence: "6",
        attempt: 1,
        data: { stream: "stdout", text: "a line as the runner agent sends it" },
      },
    ]);
    expect((await entries(jobId, "events")).map((e) => e.data)).toEqual([
      { type: "job.started" },
      { type: "job.exited", exitCode: 0 },
    ]);
    const text = await admin.rest.request("GET", `/v1/admin/jobs/${jobId}/logs`, undefined, {
      accept: "text/plain",
    });
    expect(text.headers["content-type"]).toMatch(/^text\/plain/);
    expect(text.text).toBe("hello\noops\nafter a gap\na line as the runner agent sends it\n");
    await runner.close();
  });

  it(
    "a retry after a half-accepted request resumes from the reported " +
      "sequence, with no duplicate and no gap",
    async () => {
      const { runner, jobId, token, msg } = await leasedJob();
      // an unquoted token
      const broken = JSON.stringify(msg(6, "six\n")).replace(`"${token}"`, token);
      const first = await runner.rest.ndjson("/v1/runner/logs", [
        ...logLines(1, 5).map((t, i) => msg(i + 1, t)),
        broken,
        msg(7, "never stored\n"),
      ]);
      expect(first.status, first.text).toBe(400);
      expect(first.json.message).toMatch(
        /^line 6 is not valid JSON: .*; last accepted logs sequence for this lease is 5$/,
      );
      // V8 quotes the bad input in its message: never echoed
      expect(first.text).not.toContain(token.slice(0, 6));
      expect(first.headers[lastAccepted]).toBe("5");
      const resumeFrom = Number(first.headers[lastAccepted]) + 1;
      const second = await runner.rest.ndjson(
        "/v1/runner/logs",
        logLines(resumeFrom, 10).map((t, i) => msg(resumeFrom + i, t)),
      );
      expect(second.status, second.text).toBe(204);
      expect(await sequences(jobId)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
      await runner.close();
    },
  );

  it(
    "a repeated sequence is rejected and the last accepted one is reported; " +
      "messages before it stay stored",
    async () => {
      const { runner, jobId, msg } = await leasedJob();
      const reply = await runner.rest.ndjson("/v1/runner/events", [
        msg(1, { type: "a" }),
        msg(2, { type: "b" }),
        msg(3, { type: "c" }),
        msg(3, { type: "again" }),
        msg(4, { type: "d" }),
      ]);
      expect(reply.status, reply.text).toBe(409);
      expect(reply.json).toEqual({
        code: "aborted",
        message: "sequence 3 repeats (line 4); last accepted events sequence for this lease is 3",
      });
      expect(reply.headers[lastAccepted]).toBe("3");
      // In a later request too: the rule holds per lease, not per request.
      const later = await runner.rest.ndjson("/v1/runner/events", [msg(2, { type: "old" })]);
      expect(later.status).toBe(409);
      expect(later.json.message).toBe(
        "sequence 2 is not above the last accepted one (line 1); last accepted events sequence for this lease is 3",
      );
      expect(later.headers[lastAccepted]).toBe("3");
      expect(await sequences(jobId, "events")).toEqual([1, 2, 3]);
      await runner.close();
    },
  );

  it(
    "a foreign lease token is rejected like a made-up one, and the last " +
      "accepted sequence reported is 0, not my lease's",
    async () => {
      const mine = await leasedJob("r1");
      const theirs = await leasedJob("r2");
      // Another runner's token on my job: refused, and 0 reported: the number is of the lease the
      // message names, so a client following the resume rule (drop what is <= n) never drops the
      // refused message as stored.
      const wrongToken = await mine.runner.rest.ndjson("/v1/runner/logs", [
        mine.msg(1, "a\n"),
        mine.msg(2, "b\n"),
        { ...mine.msg(3, "c\n"), leaseToken: theirs.token },
      ]);
      expect(wrongToken.status, wrongToken.text).toBe(409);
      expect(wrongToken.json.message).toMatch(
        /^line 3 \(sequence 3\): the lease token is not a lease of this runner on job .*; last accepted logs sequence for this lease is 0$/,
      );
      expect(wrongToken.headers[lastAccepted]).toBe("0");
      const madeUp = await mine.runner.rest.ndjson("/v1/runner/logs", [
        { ...mine.msg(3, "c\n"), leaseToken: "AAAA" },
      ]);
      const unlined = (m: string) => m.replace(/^line \d+ /, "");
      expect(madeUp.status).toBe(409);
      expect(unlined(madeUp.json.message)).toBe(unlined(wrongToken.json.message));
      // Another runner's job and lease (in my workspace or not): refused, nothing of theirs revealed.
      const theirJob = await mine.runner.rest.ndjson("/v1/runner/logs", [
        { ...theirs.msg(1, "x\n"), runnerId: "r1" },
      ]);
      expect(theirJob.status, theirJob.text).toBe(404);
      expect(theirJob.headers[lastAccepted]).toBe("0");
      expect(await sequences(mine.jobId)).toEqual([1, 2]);
      expect(await sequences(theirs.jobId)).toEqual([]);
      await Promise.all([mine.runner.close(), theirs.runner.close()]);
    },
  );

  it(
    "a lease that expires mid-request rejects the messages after expiry, " +
      "naming the last accepted sequence",
    async () => {
      const { runner, jobId, msg } = await leasedJob();
      const req = openNdjson(runner.rest, "/v1/runner/logs");
      req.write(msg(1, "one\n"));
      req.write(msg(2, "two\n"));
      await eventually("lines 1 and 2 stored", async () =>
        (await sequences(jobId)).length === 2 ? true : undefined,
      );
      await expireLease(jobId);
      req.write(msg(3, "three\n"));
      const reply = await req.end();
      expect(reply.status, reply.text).toBe(409);
      expect(reply.json.message).toMatch(
        /^line 3 \(sequence 3\): the lease on job .* expired at .*; last accepted logs sequence for this lease is 2$/,
      );
      expect(reply.headers[lastAccepted]).toBe("2");
      expect(await sequences(jobId)).toEqual([1, 2]);
      await runner.close();
    },
  );

  it(
    "a wrong version, another runner's runnerId, a missing field and a bad " +
      "data shape are rejected naming the line and the last accepted sequence",
    async () => {
      const { runner, jobId, msg } = await leasedJob();
      const cases: Array<[(seq: number) => unknown, number, RegExp]> = [
        [
          (s) => ({ ...msg(s, "x\n"), apiVersion: "v2" }),
          400,
          /^line 2 \(sequence \d+\): apiVersion "v2" is not supported/,
        ],
        [
          (s) => ({ ...msg(s, "x\n"), apiVersion: undefined }),
          400,
          /^line 2 \(sequence \d+\): apiVersion is required/,
        ],
        [
          (s) => ({ ...msg(s, "x\n"), runnerId: "r9" }),
          403,
          /^line 2 \(sequence \d+\): runnerId "r9" does not match the certificate's runner "r1"/,
        ],
        [(s) => ({ ...msg(s, "x\n"), sequence: undefined }), 400, /^line 2: sequence is required/],
        [(s) => ({ ...msg(s, "x\n"), jobId: undefined }), 400, /^line 2: jobId is required/],
        [
          (s) => ({ ...msg(s, "x\n"), leaseToken: undefined }),
          400,
          /^line 2: leaseToken is required/,
        ],
        [(s) => msg(s, undefined), 400, /^line 2: data is required/],
        [(s) => msg(s, 42), 400, /^line 2: data is neither a string nor an object/],
        [(s) => msg(s, { stream: "stdout" }), 400, /^line 2: data has no string "text"/],
        [
          (s) => ({ ...msg(s, "x\n"), sequence: "9007199254740992" }),
          400,
          /^line 2: field "sequence" is 9007199254740992, past 2\^53 - 1 \(9007199254740991\)/,
        ],
        [(s) => ({ ...msg(s, "x\n"), sequence: "three" }), 400, /^line 2: field "sequence": /],
        [() => "[1, 2]", 400, /^line 2 must be a JSON object/],
      ];
      let last = 0;
      for (const [bad, status, message] of cases) {
        const reply = await runner.rest.ndjson("/v1/runner/logs", [
          msg(last + 1, "ok\n"),
          bad(last + 2),
          msg(last + 3, "never\n"),
        ]);
        last++;
        expect(reply.status, reply.text).toBe(status);
        expect(reply.json.message).toMatch(message);
        expect(reply.json.message).toMatch(
          new RegExp(`; last accepted logs sequence for this lease is ${last}$`),
        );
        expect(reply.headers[lastAccepted]).toBe(String(last));
      }
      const event = await runner.rest.ndjson("/v1/runner/events", [msg(1, { kind: "no type" })]);
      expect(event.status).toBe(400);
      expect(event.json.message).toMatch(
        /^line 1: data has no "type" string; an event's data is an object with a "type"/,
      );
      expect(await sequences(jobId)).toEqual(Array.from({ length: last }, (_, i) => i + 1));
      await runner.close();
    },
  );
});

/**
 * NDJSON lines of `msg` messages whose body is exactly `bodyBytes` long: the last line is padded.
 */
function bodyOf(
  msg: (s: number, data: unknown) => Record<string, unknown>,
  count: number,
  bodyBytes: number,
): string[] {
  const lines = Array.from({ length: count - 1 }, (_, i) =>
    JSON.stringify(msg(i + 1, `line ${i + 1}\n`)),
  );
  const used = lines.reduce((sum, l) => sum + Buffer.byteLength(l) + 1, 0);
  const empty = JSON.stringify(msg(count, "")) + "\n";
  const pad = bodyBytes - used - Buffer.byteLength(empty);
  lines.push(JSON.stringify(msg(count, "x".repeat(pad))));
  expect(lines.reduce((sum, l) => sum + Buffer.byteLength(l) + 1, 0)).toBe(bodyBytes);
  return lines;
}

describe(`the byte bound and concurrency (${databaseKind})`, () => {
  it(
    "a body of 1 MiB + 1 byte is cut at the line that crosses it with 413, " +
      "naming the last accepted sequence; 1 MiB exactly is accepted",
    async () => {
      const { runner, jobId, msg } = await leasedJob();
      const over = await runner.rest.ndjson("/v1/runner/logs", bodyOf(msg, 3, 1024 * 1024 + 1));
      expect(over.status, over.text).toBe(413);
      expect(over.json.code).toBe("resource_exhausted");
      expect(over.json.message).toBe(
        "line 3 takes the request body over 1048576 bytes; send it in a new " +
          "request; last accepted logs sequence for this lease is 2",
      );
      expect(over.headers[lastAccepted]).toBe("2");
      expect(await sequences(jobId)).toEqual([1, 2]);
      const exact = await runner.rest.ndjson(
        "/v1/runner/logs",
        bodyOf((s, d) => msg(s + 2, d), 3, 1024 * 1024),
      );
      expect(exact.status, exact.text).toBe(204);
      expect(await sequences(jobId)).toEqual([1, 2, 3, 4, 5]);
      await runner.close();
    },
  );

  it("events and logs of one lease stream at once, on two open requests of one connection", async () => {
    const { runner, jobId, msg } = await leasedJob();
    const logs = openNdjson(runner.rest, "/v1/runner/logs");
    const events = openNdjson(runner.rest, "/v1/runner/events");
    for (let i = 1; i <= 20; i++) {
      logs.write(msg(i, `log ${i}\n`));
      events.write(msg(i, { type: "tick", i }));
    }
    // Both requests are still open and both have stored what they were sent.
    await eventually("both streams stored their first 20 messages", async () =>
      (await sequences(jobId)).length === 20 && (await sequences(jobId, "events")).length === 20
        ? true
        : undefined,
    );
    for (let i = 21; i <= 40; i++) {
      events.write(msg(i, { type: "tick", i }));
      logs.write(msg(i, `log ${i}\n`));
    }
    const [l, e] = await Promise.all([logs.end(), events.end()]);
    expect([l.status, e.status], `${l.text} ${e.text}`).toEqual([204, 204]);
    const all = Array.from({ length: 40 }, (_, i) => i + 1);
    expect(await sequences(jobId)).toEqual(all);
    expect(await sequences(jobId, "events")).toEqual(all);
    await runner.close();
  });

  it(
    "two requests racing on the same lease and stream store each sequence " +
      "once; the loser learns the winner's last sequence",
    async () => {
      const { runner, jobId, msg } = await leasedJob();
      const lines = logLines(1, 300).map((t, i) => msg(i + 1, t));
      const replies = await Promise.all([
        runner.rest.ndjson("/v1/runner/logs", lines),
        runner.rest.ndjson("/v1/runner/logs", lines),
      ]);
      expect(replies.map((r) => r.status).sort()).toContainEqual(204);
      for (const r of replies.filter((r) => r.status !== 204)) {
        expect(r.status, r.text).toBe(409);
        expect(Number(r.headers[lastAccepted])).toBeGreaterThan(0);
      }
      expect(await sequences(jobId)).toEqual(Array.from({ length: 300 }, (_, i) => i + 1));
      await runner.close();
    },
  );

  it("a job's log reads in order across attempts, each entry with its attempt", async () => {
    const ws = freshWorkspace();
    const first = await leasedJob("r1", ws);
    expect(
      (
        await first.runner.rest.ndjson(
          "/v1/runner/logs",
          logLines(1, 3).map((t, i) => first.msg(i + 1, t)),
        )
      ).status,
    ).toBe(204);
    await expireLease(first.jobId);
    await cp.plane.broker.sweep();
    const claim = await first.runner.claim();
    expect(claim.json.job.id).toBe(first.jobId);
    const second = {
      ...first,
      msg: (s: number, d: unknown) => ({ ...first.msg(s, d), leaseToken: claim.json.token }),
    };
    expect(
      (
        await first.runner.rest.ndjson(
          "/v1/runner/logs",
          logLines(1, 2).map((t, i) => second.msg(i + 1, t)),
        )
      ).status,
    ).toBe(204);
    // The old lease stays dead for streams.
    const stale = await first.runner.rest.ndjson("/v1/runner/logs", [first.msg(4, "late\n")]);
    expect(stale.status).toBe(409);
    expect(stale.headers[lastAccepted]).toBe("3");
    const read = await entries(first.jobId);
    expect(read.map((e) => [e.attempt, Number(e.sequence), e.data])).toEqual([
      [1, 1, "line 1\n"],
      [1, 2, "line 2\n"],
      [1, 3, "line 3\n"],
      [2, 1, "line 1\n"],
      [2, 2, "line 2\n"],
    ]);
    await first.runner.close();
  });
});

describe(`events and logs through generated clients (${databaseKind})`, () => {
  for (const protocol of rpcProtocols) {
    it(
      `client streaming over ${protocol}: accepted in order; a rejected ` +
        `message names the last accepted sequence in the message and the metadata`,
      async () => {
        const { runner, jobId, token } = await leasedJob("g1");
        await runner.close();
        const client = createTestClient(
          RunnerService,
          cp.url,
          cp.pki.ca.certPem,
          await cp.pki.runner("g1", `st${n}`),
          protocol,
        );
        const message = (sequence: number, data: unknown) => ({
          apiVersion: "v1",
          runnerId: "g1",
          jobId,
          leaseToken: token,
          sequence: BigInt(sequence),
          data: fromJson(ValueSchema, data as never),
        });
        async function* send(
          from: number,
          to: number,
          extra: Array<ReturnType<typeof message>> = [],
        ) {
          for (let s = from; s <= to; s++)
            yield message(s, { stream: "stdout", text: `${protocol} ${s}\n` });
          yield* extra;
        }
        await client.logs(send(1, 50));
        await client.events(send(1, 0, [message(1, { type: "job.started" })]));
        const err = await client.logs(send(51, 60, [message(60, "again\n")])).then(
          () => undefined,
          (e: unknown) => ConnectError.from(e),
        );
        expect(err?.code).toBe(Code.Aborted);
        expect(err?.rawMessage).toBe(
          "sequence 60 repeats (message 11); last accepted logs sequence for this lease is 60",
        );
        expect(err?.metadata.get(lastAccepted)).toBe("60");
        expect(await sequences(jobId)).toEqual(Array.from({ length: 60 }, (_, i) => i + 1));
        expect((await entries(jobId, "events")).map((e) => e.data)).toEqual([
          { type: "job.started" },
        ]);
      },
    );
  }

  it("client streaming is bounded to 1 MiB of data per request too", async () => {
    const { runner, jobId, token } = await leasedJob("g2");
    await runner.close();
    const client = createTestClient(
      RunnerService,
      cp.url,
      cp.pki.ca.certPem,
      await cp.pki.runner("g2", `st${n}`),
      "grpc",
    );
    const chunk = "y".repeat(100 * 1024);
    async function* send() {
      for (let s = 1; s <= 20; s++)
        yield {
          apiVersion: "v1",
          runnerId: "g2",
          jobId,
          leaseToken: token,
          sequence: BigInt(s),
          data: fromJson(ValueSchema, chunk),
        };
    }
    const err = await client.logs(send()).then(
      () => undefined,
      (e: unknown) => ConnectError.from(e),
    );
    expect(err?.code).toBe(Code.ResourceExhausted);
    expect(err?.rawMessage).toMatch(
      /^message 11 takes the request over 1048576 bytes of data; send it in a new request; last accepted logs sequence for this lease is 10$/,
    );
    expect(await sequences(jobId)).toHaveLength(10);
  });
});

describe(`the time bound (${databaseKind})`, () => {
  let short: TestControlPlane;
  let shortAdmin: AdminActor;
  beforeAll(async () => {
    short = await startTestControlPlane({ streamMaxSeconds: 1, pki: cp.pki });
    shortAdmin = await adminActor(short);
  });
  afterAll(async () => {
    await shortAdmin?.close();
    await short?.close();
  });

  it(
    "a request that stays open past the server's bound is ended by the " +
      "server, naming the last accepted sequence",
    async () => {
      const { runner, jobId, msg } = await lease(short, shortAdmin, "r1", "slow");
      const req = openNdjson(runner.rest, "/v1/runner/logs");
      req.write(msg(1, "one\n"));
      req.write(msg(2, "two\n"));
      const reply = await req.reply; // never ended by the client
      expect(reply.status, reply.text).toBe(504);
      expect(reply.json).toEqual({
        code: "deadline_exceeded",
        message:
          "the request stayed open past the server's bound of 1 s (runners keep " +
          "each request under 25 s); send the rest in a new request; last accepted " +
          "logs sequence for this lease is 2",
      });
      expect(reply.headers[lastAccepted]).toBe("2");
      expect(await readSequences(shortAdmin, jobId)).toEqual([1, 2]);
      await runner.close();
    },
  );
});

describe(`batches of many requests stored by one statement (${databaseKind})`, () => {
  /** A batch of `items` ([sequence, data]) on `job`'s lease, as ingest hands it to the appender. */
  const batchOf = (
    job: { runner: { runnerId: string }; workspaceId: string; jobId: string; token: string },
    stream: "logs" | "events",
    items: Array<[number, unknown]>,
  ): AppendBatch => ({
    holder: { workspaceId: job.workspaceId, runnerId: job.runner.runnerId },
    stream,
    jobId: job.jobId,
    tokenHash: hashLeaseToken(job.token),
    sequences: items.map(([sequence]) => sequence),
    data: items.map(([, data]) => JSON.stringify(data)),
  });
  const peaksOf = async (jobId: string) =>
    (
      await sql<{
        peak_cpu_cores: number;
        samples: number;
      }>`select peak_cpu_cores, samples from job_peaks where job_id = ${jobId}`.execute(
        cp.plane.store.db,
      )
    ).rows[0];

  it(
    "each batch keeps its own outcome and its own rules: stored, lease not " +
      "live, sequence not increasing; events fold into each job's peaks and " +
      "progress",
    async () => {
      const ws = freshWorkspace();
      const [a, b, c, d] = [
        await leasedJob("ba", ws),
        await leasedJob("bb", ws),
        await leasedJob("bc", ws),
        await leasedJob("bd", ws),
      ];
      expect(
        (await c.runner.rest.ndjson("/v1/runner/logs", [c.msg(1, "one\n"), c.msg(2, "two\n")]))
          .status,
      ).toBe(204);
      await expireLease(b.jobId);
      const outcomes = await appendBatches(cp.plane.store.db, [
        batchOf(a, "logs", [
          [1, "a1\n"],
          [2, { stream: "stderr", text: "a2\n" }],
        ]),
        batchOf(b, "logs", [[1, "b1\n"]]),
        batchOf(c, "logs", [
          [2, "again\n"],
          [3, "three\n"],
        ]),
        batchOf(d, "events", [
          [1, { type: "resource.sample", cpuCores: 0.5, memoryBytes: 1000 }],
          [2, { type: "job.progress", percent: 20 }],
          [3, { type: "job.progress", percent: 30 }],
        ]),
        batchOf(a, "events", [
          [1, { type: "resource.sample", cpuCores: 1.5, memoryBytes: 2000 }],
          [2, { type: "resource.sample", cpuCores: 0.25, memoryBytes: 3000 }],
        ]),
      ]);
      expect(outcomes).toEqual([
        "stored",
        "lease_not_live",
        "sequence_not_increasing",
        "stored",
        "stored",
      ]);
      expect((await entries(a.jobId)).map((e) => e.data)).toEqual([
        "a1\n",
        { stream: "stderr", text: "a2\n" },
      ]);
      expect(await sequences(b.jobId)).toEqual([]);
      // the refused batch stored nothing, "three" included
      expect(await sequences(c.jobId)).toEqual([1, 2]);
      expect(await sequences(d.jobId, "events")).toEqual([1, 2, 3]);
      expect(await peaksOf(a.jobId)).toEqual({ peak_cpu_cores: 1.5, samples: 2 });
      expect(await peaksOf(d.jobId)).toEqual({ peak_cpu_cores: 0.5, samples: 1 });
      expect((await admin.job(d.jobId)).json.job.progress).toMatchObject({ percent: 30 });
      expect((await admin.job(a.jobId)).json.job.progress).toBeUndefined();
      // The cursors moved only for the stored batches: the next batch of c goes on from 2, of a from
      // 2.
      expect(
        await appendBatches(cp.plane.store.db, [
          batchOf(c, "logs", [[3, "three\n"]]),
          batchOf(a, "logs", [[2, "repeat\n"]]),
        ]),
      ).toEqual(["stored", "sequence_not_increasing"]);
      for (const j of [a, b, c, d]) await j.runner.close();
    },
  );

  it(
    "the appender: two batches of one lease and stream in a turn go in turn; " +
      "a batch that fails its statement fails alone",
    async () => {
      const ws = freshWorkspace();
      const [a, b] = [await leasedJob("aa", ws), await leasedJob("ab", ws)];
      const append = createAppender(cp.plane.store.db, { maxBatch: 32, maxInFlight: 1 });
      // Asked in one turn: one statement would hold a's cursor row twice; the second waits for the
      // next.
      const turn = await Promise.all([
        append(batchOf(a, "logs", [[1, "one\n"]])),
        append(batchOf(b, "logs", [[1, "b\n"]])),
        append(batchOf(a, "logs", [[2, "two\n"]])),
        append(batchOf(a, "logs", [[2, "two again\n"]])),
      ]);
      expect(turn).toEqual(["stored", "stored", "stored", "sequence_not_increasing"]);
      expect((await entries(a.jobId)).map((e) => e.data)).toEqual(["one\n", "two\n"]);
      // A batch Postgres refuses (JSON it cannot read) fails its statement; the others of it are then
      // stored alone.
      const broken = { ...batchOf(a, "logs", [[3, "x"]]), data: ["nope"] };
      const mixed = await Promise.allSettled([
        append(batchOf(b, "logs", [[2, "b2\n"]])),
        append(broken),
        append(batchOf(a, "events", [[1, { type: "job.started" }]])),
      ]);
      expect(mixed.map((r) => r.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
      expect(await sequences(b.jobId)).toEqual([1, 2]);
      expect(await sequences(a.jobId, "events")).toEqual([1]);
      expect(await sequences(a.jobId)).toEqual([1, 2]);
      for (const j of [a, b]) await j.runner.close();
    },
  );
});
