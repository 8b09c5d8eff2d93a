import "reflect-metadata";
import { describe, expect, it } from "vitest";
import { toJson } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import { AdminService } from "../../gen/forelead/admin/v1/admin_pb.js";
import { eventually, leasedJob as lease } from "../support/actors.js";
import { createTestClient } from "../support/clients.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";
import { readEventStream } from "../support/ndjson.js";
import { logLines, readEntries } from "../support/streams.js";

const cp = useControlPlane();
const { admin } = cp;
let n = 0;
const freshWorkspace = () => `rd${++n}`;

const leasedJob = (runnerId = "r1") => lease(cp, admin, runnerId, freshWorkspace());

describe(`reading a job's stream (${databaseKind})`, () => {
  it("reads are paged by position and filtered by sequence and attempt", async () => {
    const { runner, jobId, msg } = await leasedJob();
    expect(
      (
        await runner.rest.ndjson(
          "/v1/runner/logs",
          logLines(1, 25).map((t, i) => msg(i + 1, t)),
        )
      ).status,
    ).toBe(204);
    const pages: number[][] = [];
    for (let after = ""; ;) {
      const page = await readEntries(
        admin,
        jobId,
        "logs",
        `?pageSize=10${after ? `&after=${after}` : ""}`,
      );
      if (page.length === 0) break;
      pages.push(page.map((e) => Number(e.sequence)));
      after = page[page.length - 1]!.position;
    }
    expect(pages.map((p) => p.length)).toEqual([10, 10, 5]);
    expect(pages.flat()).toEqual(Array.from({ length: 25 }, (_, i) => i + 1));
    expect(
      (await readEntries(admin, jobId, "logs", "?fromSequence=20")).map((e) => Number(e.sequence)),
    ).toEqual([20, 21, 22, 23, 24, 25]);
    expect(await readEntries(admin, jobId, "logs", "?attempt=2")).toEqual([]);
    expect(await readEntries(admin, jobId, "logs", "?attempt=1")).toHaveLength(25);
    await runner.close();
  });

  it("events read as text are one JSON line each", async () => {
    const { runner, jobId, msg } = await leasedJob();
    expect(
      (
        await runner.rest.ndjson("/v1/runner/events", [
          msg(1, { type: "job.started" }),
          msg(2, { type: "job.exited", exitCode: 0 }),
        ])
      ).status,
    ).toBe(204);
    const text = await admin.rest.request("GET", `/v1/admin/jobs/${jobId}/events`, undefined, {
      accept: "text/plain",
    });
    expect(text.text).toBe('{"type":"job.started"}\n{"type":"job.exited","exitCode":0}\n');
    await runner.close();
  });

  it("bad read requests are refused by name: unknown job, bad position, page size, a runner certificate", async () => {
    const { runner, jobId } = await leasedJob();
    const unknown = await admin.rest.request(
      "GET",
      "/v1/admin/jobs/0190f1e2-3c4d-7e5f-8a9b-0c1d2e3f4a5b/logs",
    );
    expect([unknown.status, unknown.json.message]).toEqual([
      404,
      "job 0190f1e2-3c4d-7e5f-8a9b-0c1d2e3f4a5b not found",
    ]);
    const badAfter = await admin.rest.request("GET", `/v1/admin/jobs/${jobId}/logs?after=nope`);
    expect([badAfter.status, badAfter.json.message]).toEqual([
      400,
      'after "nope" is not a position; pass the position of an entry read before',
    ]);
    const badPage = await admin.rest.request(
      "GET",
      `/v1/admin/jobs/${jobId}/events?pageSize=10001`,
    );
    expect([badPage.status, badPage.json.message]).toEqual([
      400,
      "pageSize must be 1 to 10000 (0 means 1000); got 10001",
    ]);
    const asRunner = await runner.rest.request("GET", `/v1/admin/jobs/${jobId}/logs`);
    expect(asRunner.status).toBe(403);
    await runner.close();
  });
});

describe(`following a job live (${databaseKind})`, () => {
  it(
    "a completion racing the stream: the follower gets every accepted line, " +
      "exactly, before its stream ends",
    async () => {
      const { runner, jobId, token, msg } = await leasedJob();
      const client = createTestClient(
        AdminService,
        cp.url,
        cp.pki.ca.certPem,
        await cp.pki.service("test-admin"),
        "connect-binary",
      );
      const followed: number[] = [];
      const following = (async () => {
        for await (const entry of client.getJobLogs({ jobId, follow: true }))
          followed.push(Number(entry.sequence));
      })();
      let sent = 0;
      let lastAccepted: number | undefined;
      const streaming = (async () => {
        for (;;) {
          const reply = await runner.rest.ndjson(
            "/v1/runner/logs",
            logLines(sent + 1, sent + 20).map((t, i) => msg(sent + 1 + i, t)),
          );
          if (reply.status !== 204) {
            expect(reply.status, reply.text).toBe(409);
            lastAccepted = Number(reply.headers["forelead-last-accepted-sequence"]);
            return;
          }
          sent += 20;
        }
      })();
      await eventually("some lines stored", async () => (followed.length >= 40 ? true : undefined));
      expect((await runner.complete(jobId, token)).status).toBe(200);
      await Promise.all([streaming, following]);
      expect(lastAccepted).toBe(sent);
      expect(followed).toEqual(Array.from({ length: sent }, (_, i) => i + 1));
      await runner.close();
    },
  );

  it(
    "an SSE follower sees lines as they arrive, with positions as event ids, " +
      "and stops when the job settles",
    async () => {
      const { runner, jobId, token, msg } = await leasedJob();
      const seen: Array<{ event: string; id?: string; data: string }> = [];
      const follower = readEventStream(admin.rest, `/v1/admin/jobs/${jobId}/logs?follow=1`, (e) =>
        seen.push(e),
      );
      expect(await follower.status).toBe(200);
      for (let s = 1; s <= 3; s++) {
        expect((await runner.rest.ndjson("/v1/runner/logs", [msg(s, `live ${s}\n`)])).status).toBe(
          204,
        );
        // Each line reaches the follower before the next one is even sent.
        await eventually(`the follower to see line ${s}`, async () =>
          seen.length === s ? true : undefined,
        );
      }
      expect(seen.map((e) => [e.event, JSON.parse(e.data).data])).toEqual([
        ["message", "live 1\n"],
        ["message", "live 2\n"],
        ["message", "live 3\n"],
      ]);
      expect(seen.map((e) => e.id)).toEqual(seen.map((e) => JSON.parse(e.data).position));
      expect((await runner.complete(jobId, token)).status).toBe(200);
      await follower.done; // the server ends the stream once the job settled
      expect(seen.map((e) => e.event)).toEqual(["message", "message", "message", "end"]);

      // A reconnecting EventSource resumes after its Last-Event-ID; a settled job's stream then just
      // ends.
      const resumed: Array<{ event: string; data: string }> = [];
      await readEventStream(
        admin.rest,
        `/v1/admin/jobs/${jobId}/logs?follow=1`,
        (e) => resumed.push(e),
        { "last-event-id": seen[0]!.id! },
      ).done;
      expect(resumed.map((e) => (e.event === "end" ? "end" : JSON.parse(e.data).data))).toEqual([
        "live 2\n",
        "live 3\n",
        "end",
      ]);
      await runner.close();
    },
  );

  it(
    "a follower through the generated client (server streaming) sees lines " +
      "as they arrive and its stream ends when the job settles",
    async () => {
      const { runner, jobId, token, msg } = await leasedJob();
      const client = createTestClient(
        AdminService,
        cp.url,
        cp.pki.ca.certPem,
        await cp.pki.service("test-admin"),
        "grpc",
      );
      const seen: string[] = [];
      const following = (async () => {
        for await (const entry of client.getJobEvents({ jobId, follow: true }))
          seen.push((toJson(ValueSchema, entry.data!) as { type: string }).type);
      })();
      expect(
        (await runner.rest.ndjson("/v1/runner/events", [msg(1, { type: "job.started" })])).status,
      ).toBe(204);
      await eventually("the follower to see job.started", async () =>
        seen.length === 1 ? true : undefined,
      );
      expect(
        (await runner.rest.ndjson("/v1/runner/events", [msg(2, { type: "job.exited" })])).status,
      ).toBe(204);
      await eventually("the follower to see job.exited", async () =>
        seen.length === 2 ? true : undefined,
      );
      expect((await runner.complete(jobId, token)).status).toBe(200);
      await following;
      expect(seen).toEqual(["job.started", "job.exited"]);
      // Unknown jobs fail the call.
      const err = await (async () => {
        for await (const _ of client.getJobLogs({
          jobId: "0190f1e2-3c4d-7e5f-8a9b-0c1d2e3f4a5b",
          follow: true,
        }))
          void _;
      })().then(
        () => undefined,
        (e: unknown) => ConnectError.from(e),
      );
      expect(err?.code).toBe(Code.NotFound);
      await runner.close();
    },
  );
});
