import "reflect-metadata";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sql } from "kysely";
import { Code, ConnectError } from "@connectrpc/connect";
import { AdminService } from "../../gen/forelead/admin/v1/admin_pb.js";
import { RunnerService, type LogsRequest } from "../../gen/forelead/runner/v1/runner_pb.js";
import { adminActor, eventually, runnerActor, type AdminActor, type RunnerActor } from "../support/actors.js";
import { createTestClient, rpcProtocols } from "../support/clients.js";
import { startTestControlPlane, type TestControlPlane } from "../support/control-plane.js";
import { databaseKind } from "../support/database.js";
import { openNdjson } from "../support/ndjson.js";

let cp: TestControlPlane;
let admin: AdminActor;
let n = 0;
const freshWorkspace = () => `st${++n}`;
const lastAccepted = "forelead-last-accepted-sequence";

beforeAll(async () => {
  cp = await startTestControlPlane();
  admin = await adminActor(cp);
});
afterAll(async () => {
  await admin?.close();
  await cp?.close();
});

interface Leased {
  readonly runner: RunnerActor;
  readonly jobId: string;
  readonly token: string;
  /** One message of this lease, as WIRE.md writes it. */
  msg(sequence: number, data: unknown): Record<string, unknown>;
}

async function leasedJob(runnerId = "r1", ws = freshWorkspace()): Promise<Leased> {
  const runner = await runnerActor(cp, runnerId, ws);
  expect((await runner.register()).status).toBe(200);
  const jobId = (await admin.enqueue({ workspaceId: ws })).json.job.id;
  const claim = await runner.claim();
  expect(claim.json?.job?.id, claim.text).toBe(jobId);
  const token = claim.json.token as string;
  return { runner, jobId, token, msg: (sequence, data) => ({ apiVersion: "v1", runnerId, jobId, leaseToken: token, sequence, data }) };
}

const logLines = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => `line ${from + i}\n`);

/** A job's stream as the admin reads it: NDJSON entries. */
async function entries(jobId: string, stream: "logs" | "events" = "logs", query = ""): Promise<Array<{ sequence: string; attempt: number; data: unknown; position: string }>> {
  const reply = await admin.rest.request("GET", `/v1/admin/jobs/${jobId}/${stream}${query}`);
  expect(reply.status, reply.text).toBe(200);
  return reply.text.split("\n").filter(Boolean).map((l) => JSON.parse(l));
}
const sequences = async (jobId: string, stream: "logs" | "events" = "logs") => (await entries(jobId, stream)).map((e) => Number(e.sequence));

describe(`events and logs over REST (${databaseKind})`, () => {
  it("the happy path: NDJSON in, 204, every message stored in order and readable as NDJSON and text", async () => {
    const { runner, jobId, msg } = await leasedJob();
    const logs = await runner.rest.ndjson("/v1/runner/logs", [msg(1, "hello\n"), msg(2, { stream: "stderr", text: "oops\n" }), msg(5, "after a gap\n")]);
    expect(logs.status, logs.text).toBe(204);
    const events = await runner.rest.ndjson("/v1/runner/events", [msg(1, { type: "job.started" }), msg(2, { type: "job.exited", exitCode: 0 })]);
    expect(events.status, events.text).toBe(204);

    const read = await entries(jobId);
    expect(read.map(({ sequence, attempt, data }) => ({ sequence, attempt, data }))).toEqual([
      { sequence: "1", attempt: 1, data: "hello\n" },
      { sequence: "2", attempt: 1, data: { stream: "stderr", text: "oops\n" } },
      { sequence: "5", attempt: 1, data: "after a gap\n" },
    ]);
    expect((await entries(jobId, "events")).map((e) => e.data)).toEqual([{ type: "job.started" }, { type: "job.exited", exitCode: 0 }]);
    const text = await admin.rest.request("GET", `/v1/admin/jobs/${jobId}/logs`, undefined, { accept: "text/plain" });
    expect(text.headers["content-type"]).toMatch(/^text\/plain/);
    expect(text.text).toBe("hello\noops\nafter a gap\n");
    await runner.close();
  });

  it("a retry after a half-accepted request resumes from the reported sequence, with no duplicate and no gap", async () => {
    const { runner, jobId, msg } = await leasedJob();
    const first = await runner.rest.ndjson("/v1/runner/logs", [...logLines(1, 5).map((t, i) => msg(i + 1, t)), "{not json", msg(7, "never stored\n")]);
    expect(first.status, first.text).toBe(400);
    expect(first.json.message).toMatch(/^line 6 is not valid JSON.*; last accepted logs sequence for this lease is 5$/);
    expect(first.headers[lastAccepted]).toBe("5");
    const resumeFrom = Number(first.headers[lastAccepted]) + 1;
    const second = await runner.rest.ndjson("/v1/runner/logs", logLines(resumeFrom, 10).map((t, i) => msg(resumeFrom + i, t)));
    expect(second.status, second.text).toBe(204);
    expect(await sequences(jobId)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    await runner.close();
  });

  it("a repeated sequence is rejected and the last accepted one is reported; messages before it stay stored", async () => {
    const { runner, jobId, msg } = await leasedJob();
    const reply = await runner.rest.ndjson("/v1/runner/events", [msg(1, { type: "a" }), msg(2, { type: "b" }), msg(3, { type: "c" }), msg(3, { type: "again" }), msg(4, { type: "d" })]);
    expect(reply.status, reply.text).toBe(409);
    expect(reply.json).toEqual({ code: "aborted", message: "sequence 3 repeats (line 4); last accepted events sequence for this lease is 3" });
    expect(reply.headers[lastAccepted]).toBe("3");
    // In a later request too: the rule holds per lease, not per request.
    const later = await runner.rest.ndjson("/v1/runner/events", [msg(2, { type: "old" })]);
    expect(later.status).toBe(409);
    expect(later.json.message).toBe("sequence 2 is not above the last accepted one (line 1); last accepted events sequence for this lease is 3");
    expect(later.headers[lastAccepted]).toBe("3");
    expect(await sequences(jobId, "events")).toEqual([1, 2, 3]);
    await runner.close();
  });

  it("a foreign lease is rejected with the last accepted sequence reported", async () => {
    const mine = await leasedJob("r1");
    const theirs = await leasedJob("r2");
    // Another runner's token on my job: refused, and my own lease's progress is what I learn.
    const wrongToken = await mine.runner.rest.ndjson("/v1/runner/logs", [mine.msg(1, "a\n"), mine.msg(2, "b\n"), { ...mine.msg(3, "c\n"), leaseToken: theirs.token }]);
    expect(wrongToken.status, wrongToken.text).toBe(409);
    expect(wrongToken.json.message).toMatch(/^line 3 \(sequence 3\): the lease token is not a lease on job .*; last accepted logs sequence for this lease is 2$/);
    expect(wrongToken.headers[lastAccepted]).toBe("2");
    // Another runner's job and lease (in my workspace or not): refused, nothing of theirs revealed.
    const theirJob = await mine.runner.rest.ndjson("/v1/runner/logs", [{ ...theirs.msg(1, "x\n"), runnerId: "r1" }]);
    expect(theirJob.status, theirJob.text).toBe(404);
    expect(theirJob.headers[lastAccepted]).toBe("0");
    expect(await sequences(mine.jobId)).toEqual([1, 2]);
    expect(await sequences(theirs.jobId)).toEqual([]);
    await Promise.all([mine.runner.close(), theirs.runner.close()]);
  });

  it("a lease that expires mid-request rejects the messages after expiry, naming the last accepted sequence", async () => {
    const { runner, jobId, msg } = await leasedJob();
    const req = openNdjson(runner.rest, "/v1/runner/logs");
    req.write(msg(1, "one\n"));
    req.write(msg(2, "two\n"));
    await eventually("lines 1 and 2 stored", async () => ((await sequences(jobId)).length === 2 ? true : undefined));
    await expireLease(jobId);
    req.write(msg(3, "three\n"));
    const reply = await req.end();
    expect(reply.status, reply.text).toBe(409);
    expect(reply.json.message).toMatch(/^line 3 \(sequence 3\): the lease on job .* expired at .*; last accepted logs sequence for this lease is 2$/);
    expect(reply.headers[lastAccepted]).toBe("2");
    expect(await sequences(jobId)).toEqual([1, 2]);
    await runner.close();
  });

  it("a wrong version, another runner's runnerId, a missing field and a bad data shape are rejected naming the line and the last accepted sequence", async () => {
    const { runner, jobId, msg } = await leasedJob();
    const cases: Array<[(seq: number) => unknown, number, RegExp]> = [
      [(s) => ({ ...msg(s, "x\n"), apiVersion: "v2" }), 400, /^line 2 \(sequence \d+\): apiVersion "v2" is not supported/],
      [(s) => ({ ...msg(s, "x\n"), apiVersion: undefined }), 400, /^line 2 \(sequence \d+\): apiVersion is required/],
      [(s) => ({ ...msg(s, "x\n"), runnerId: "r9" }), 403, /^line 2 \(sequence \d+\): runnerId "r9" does not match the certificate's runner "r1"/],
      [(s) => ({ ...msg(s, "x\n"), sequence: undefined }), 400, /^line 2: sequence is required/],
      [(s) => ({ ...msg(s, "x\n"), jobId: undefined }), 400, /^line 2: jobId is required/],
      [(s) => ({ ...msg(s, "x\n"), leaseToken: undefined }), 400, /^line 2: leaseToken is required/],
      [(s) => msg(s, undefined), 400, /^line 2: data is required/],
      [(s) => msg(s, 42), 400, /^line 2: data is neither a string nor an object/],
      [(s) => msg(s, { stream: "stdout" }), 400, /^line 2: data has no string "text"/],
      [(s) => ({ ...msg(s, "x\n"), sequence: "9007199254740992" }), 400, /^line 2: sequence 9007199254740992 is over the largest accepted, 9007199254740991/],
      [(s) => ({ ...msg(s, "x\n"), sequence: "three" }), 400, /^line 2: field "sequence": /],
      [() => "[1, 2]", 400, /^line 2 must be a JSON object/],
    ];
    let last = 0;
    for (const [bad, status, message] of cases) {
      const reply = await runner.rest.ndjson("/v1/runner/logs", [msg(last + 1, "ok\n"), bad(last + 2), msg(last + 3, "never\n")]);
      last++;
      expect(reply.status, reply.text).toBe(status);
      expect(reply.json.message).toMatch(message);
      expect(reply.json.message).toMatch(new RegExp(`; last accepted logs sequence for this lease is ${last}$`));
      expect(reply.headers[lastAccepted]).toBe(String(last));
    }
    const event = await runner.rest.ndjson("/v1/runner/events", [msg(1, { kind: "no type" })]);
    expect(event.status).toBe(400);
    expect(event.json.message).toMatch(/^line 1: data has no "type" string; an event's data is an object with a "type"/);
    expect(await sequences(jobId)).toEqual(Array.from({ length: last }, (_, i) => i + 1));
    await runner.close();
  });
});

async function expireLease(jobId: string): Promise<void> {
  const db = cp.plane.store.db;
  await sql`update jobs set lease_expires_at = now() - interval '1 second' where id = ${jobId}`.execute(db);
  await sql`update leases set expires_at = now() - interval '1 second' where job_id = ${jobId} and ended_at is null`.execute(db);
}

void Code;
void ConnectError;
void AdminService;
void RunnerService;
void createTestClient;
void rpcProtocols;
export type { LogsRequest };
