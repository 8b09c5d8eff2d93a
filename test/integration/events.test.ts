// The global event stream (docs/fleet.md "The event stream"): every change
// writes its event in its own transaction; a follower sees each event once, in id
// order, and resumes exactly with Last-Event-ID (REST) or afterId (Connect) while
// jobs flow; the filters work; retention prunes old rows in batches; an id
// taken by a transaction that commits late is not skipped.
import { sql } from "kysely";
import pg from "pg";
import { describe, expect, it } from "vitest";
import { FleetService } from "../../gen/forelead/admin/v1/fleet_pb.js";
import { readEvents } from "../../src/events/read.js";
import { createRetention } from "../../src/ops/retention.js";
import { eventually, registeredRunner, type RunnerActor } from "../support/actors.js";
import { createTestClient } from "../support/clients.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane, useReplicaPair } from "../support/fixture.js";
import { adminActor } from "../support/actors.js";
import { readEventStream } from "../support/ndjson.js";
import { expireLease } from "../support/streams.js";

const cp = useControlPlane();
const { admin } = cp;
let n = 0;
const freshWorkspace = () => `ev${++n}`;

interface EventJson {
  readonly id: string;
  readonly type: string;
  readonly workspaceId?: string;
  readonly runnerId?: string;
  readonly jobId?: string;
  readonly data?: Record<string, unknown>;
}

async function readPage(query: string): Promise<EventJson[]> {
  const reply = await admin.rest.request("GET", `/v1/admin/events?${query}`);
  expect(reply.status, reply.text).toBe(200);
  expect(reply.headers["content-type"]).toBe("application/x-ndjson");
  return reply.text
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l) as EventJson);
}

const post = (path: string, body: Record<string, unknown> = {}) =>
  admin.rest.request("POST", path, { apiVersion: "v1", ...body });

describe(`the event stream (${databaseKind})`, () => {
  it(
    "each change writes its event: queued, leased, requeued with why, " +
      "settled with outcome and error code, cancel, runner and workspace " +
      "changes",
    async () => {
      const w = freshWorkspace();
      const runner = await registeredRunner(cp, "r1", w);
      const job = (await admin.enqueue({ workspaceId: w, maxAttempts: 5 })).json.job.id as string;
      let lease = await runner.claim();
      expect((await runner.release(job, lease.json.token)).status).toBe(204);
      lease = await runner.claim();
      const retry = {
        outcome: "failed",
        exitCode: 1,
        completionId: "c1",
        error: { code: "flaky", message: "try again", retryable: true },
      };
      expect((await runner.complete(job, lease.json.token, retry)).json.job.state).toBe("queued");
      lease = await runner.claim();
      await expireLease(cp, job);
      expect(await cp.plane.broker.sweep()).toBe(1);
      lease = await runner.claim();
      expect(
        (
          await runner.complete(job, lease.json.token, {
            outcome: "failed",
            exitCode: 2,
            completionId: "c2",
            error: { code: "exit_code", message: "exited 2" },
          })
        ).json.job.state,
      ).toBe("failed");
      const queued = (await admin.enqueue({ workspaceId: w })).json.job.id as string;
      expect((await admin.cancel(queued)).json.job.state).toBe("cancelled");
      expect((await admin.cancel(queued)).status).toBe(200); // a repeat writes nothing
      expect((await post(`/v1/admin/runners/r1/pause`, { workspaceId: w })).status).toBe(200);
      // nothing changes, no event
      expect((await post(`/v1/admin/runners/r1/pause`, { workspaceId: w })).status).toBe(200);
      expect((await post(`/v1/admin/runners/r1/resume`, { workspaceId: w })).status).toBe(200);
      expect((await post(`/v1/admin/workspaces/${w}/pause`)).status).toBe(200);
      expect((await post(`/v1/admin/workspaces/${w}/resume`)).status).toBe(200);
      expect(
        (await post(`/v1/admin/runners/r1/retire`, { workspaceId: w, reason: "done" })).status,
      ).toBe(200);

      const events = await readPage(`workspaceId=${w}`);
      expect(events.map((e) => [e.type, e.runnerId ?? "", e.jobId ?? "", e.data ?? {}])).toEqual([
        ["runner.registered", "r1", "", { slots: 1, labels: ["linux"] }],
        ["job.queued", "", job, { labels: ["linux"], priority: 0 }],
        ["job.leased", "r1", job, { attempt: 1 }],
        ["job.requeued", "r1", job, { why: "released", attempt: 0 }],
        ["job.leased", "r1", job, { attempt: 1 }],
        ["job.requeued", "r1", job, { why: "retryable_failure", attempt: 1 }],
        ["job.leased", "r1", job, { attempt: 2 }],
        ["job.requeued", "r1", job, { why: "lease_lost", attempt: 2 }],
        ["runner.lease_lost", "r1", job, { attempt: 2 }],
        ["job.leased", "r1", job, { attempt: 3 }],
        ["job.settled", "r1", job, { outcome: "failed", errorCode: "exit_code", attempt: 3 }],
        ["job.queued", "", queued, { labels: ["linux"], priority: 0 }],
        [
          "job.cancel_requested",
          "",
          queued,
          { state: "queued", by: "spiffe://forelead/services/test-admin" },
        ],
        ["job.settled", "", queued, { outcome: "cancelled", errorCode: "cancelled", attempt: 0 }],
        ["runner.paused", "r1", "", { by: "spiffe://forelead/services/test-admin", reason: "" }],
        ["runner.resumed", "r1", "", { by: "spiffe://forelead/services/test-admin" }],
        ["workspace.paused", "", "", { by: "spiffe://forelead/services/test-admin", reason: "" }],
        ["workspace.resumed", "", "", { by: "spiffe://forelead/services/test-admin" }],
        [
          "runner.retired",
          "r1",
          "",
          { by: "spiffe://forelead/services/test-admin", reason: "done" },
        ],
      ]);
      expect(events.every((e) => e.workspaceId === w)).toBe(true);
      const ids = events.map((e) => Number(e.id));
      expect(ids).toEqual([...ids].sort((a, b) => a - b));
      // No event carries a lease token.
      expect(JSON.stringify(events)).not.toContain(lease.json.token);
      await runner.close();
    },
  );

  it("filters by workspace and types, pages with afterId, and refuses a bad type or afterId by name", async () => {
    const [w1, w2] = [freshWorkspace(), freshWorkspace()];
    for (const w of [w1, w2, w1])
      expect((await admin.enqueue({ workspaceId: w })).status).toBe(200);
    await post(`/v1/admin/workspaces/${w1}/pause`);
    const w1Events = await readPage(`workspaceId=${w1}`);
    expect(w1Events.map((e) => e.type)).toEqual(["job.queued", "job.queued", "workspace.paused"]);
    expect(
      (await readPage(`workspaceId=${w1}&types=workspace.paused&types=runner.paused`)).map(
        (e) => e.type,
      ),
    ).toEqual(["workspace.paused"]);
    expect((await readPage(`workspaceId=${w2}&types=job.queued`)).length).toBe(1);
    const page = await readPage(`workspaceId=${w1}&afterId=${w1Events[0]!.id}&pageSize=1`);
    expect(page.map((e) => e.id)).toEqual([w1Events[1]!.id]);

    const badType = await admin.rest.request("GET", "/v1/admin/events?types=job.exploded");
    expect(badType.status).toBe(400);
    expect(badType.json.message).toMatch(
      /^types\[0\] "job.exploded" is not an event type; one of job.queued, job.leased, /,
    );
    const badAfter = await admin.rest.request("GET", "/v1/admin/events?afterId=-3");
    expect([badAfter.status, badAfter.json.message]).toEqual([
      400,
      "afterId must be an event id (a whole number, 0 for the oldest kept); got -3",
    ]);
  });

  it(
    "a follower that disconnects and resumes (Last-Event-ID on REST, afterId " +
      "on Connect) sees every event once, in order, while 200 jobs flow " +
      "through 4 runners",
    async () => {
      const w = freshWorkspace();
      const total = 200;
      const runners: RunnerActor[] = [];
      for (let i = 1; i <= 4; i++)
        runners.push(await registeredRunner(cp, `r${i}`, w, { slots: 2 }));
      const seen: EventJson[] = [];

      // A REST follower (Server-Sent Events) from the start; it is cut off after some events.
      let sse = readEventStream(admin.rest, `/v1/admin/events?workspaceId=${w}`, (e) => {
        if (e.event === "end" || e.event === "error") return;
        const json = JSON.parse(e.data) as EventJson;
        expect([e.id, e.event]).toEqual([json.id, json.type]);
        seen.push(json);
      });
      expect(await sse.status).toBe(200);

      let done = 0;
      const work = async (runner: RunnerActor) => {
        while (done < total) {
          const claim = await runner.claim({ waitSeconds: 1 });
          if (claim.status === 204) continue;
          expect(claim.status, claim.text).toBe(200);
          const reply = await runner.complete(claim.json.job.id, claim.json.token);
          expect(reply.status, reply.text).toBe(200);
          done++;
        }
      };
      const enqueue = async () => {
        for (let i = 0; i < total; i++)
          expect((await admin.enqueue({ workspaceId: w })).status).toBe(200);
      };
      const flow = Promise.all([enqueue(), ...runners.map(work)]);

      // Disconnect mid-flow and resume with Last-Event-ID, then switch to Connect with afterId.
      await eventually(
        "the REST follower to see 150 events",
        async () => (seen.length >= 150 ? true : undefined),
        60_000,
      );
      sse.close();
      await sse.done;
      const resumeAt = seen[seen.length - 1]!.id;
      const resumed: EventJson[] = [];
      sse = readEventStream(
        admin.rest,
        `/v1/admin/events?workspaceId=${w}`,
        (e) => e.event !== "end" && resumed.push(JSON.parse(e.data) as EventJson),
        { "last-event-id": resumeAt },
      );
      expect(await sse.status).toBe(200);
      await eventually(
        "the resumed follower to see 300 more events",
        async () => (resumed.length >= 300 ? true : undefined),
        60_000,
      );
      sse.close();
      await sse.done;
      seen.push(...resumed);

      const client = createTestClient(
        FleetService,
        cp.url,
        cp.pki.ca.certPem,
        await cp.pki.service("test-admin"),
        "connect-json",
      );
      const abort = new AbortController();
      const afterId = BigInt(seen[seen.length - 1]!.id);
      const connectFollower = (async () => {
        try {
          for await (const e of client.streamEvents(
            { workspaceId: w, afterId, follow: true },
            { signal: abort.signal },
          )) {
            seen.push({ id: String(e.id), type: e.type, jobId: e.jobId });
          }
        } catch (err) {
          if (!abort.signal.aborted) throw err;
        }
      })();
      await flow;
      const { rows } = await sql<{
        id: number | string;
        type: string;
        job_id: string | null;
      }>`select id, type, job_id::text as job_id from events where workspace_id = ${w} order by id`.execute(
        cp.plane.store.db,
      );
      expect(rows.filter((r) => r.type === "job.settled")).toHaveLength(total);
      const last = String(rows[rows.length - 1]!.id);
      await eventually(
        "the Connect follower to reach the last event",
        async () => (seen[seen.length - 1]?.id === last ? true : undefined),
        60_000,
      );
      abort.abort();
      await connectFollower;
      expect(seen.map((e) => [e.id, e.type, e.jobId ?? null])).toEqual(
        rows.map((r) => [String(r.id), r.type, r.job_id]),
      );
      await Promise.all(runners.map((r) => r.close()));
    },
    180_000,
  );

  it("retention deletes events older than it, in batches, and keeps the rest", async () => {
    const db = cp.plane.store.db;
    const w = freshWorkspace();
    await sql`insert into events (type, workspace_id, at) select 'job.queued', ${w}, now() -
      interval '8 days' from generate_series(1, 12000)`.execute(db);
    await sql`insert into events (type, workspace_id) select 'job.queued', ${w} from generate_series(1, 5)`.execute(
      db,
    );
    const retention = createRetention({ store: cp.plane.store });
    try {
      expect((await retention.pruneAll()).events).toBeGreaterThanOrEqual(12000);
    } finally {
      await retention.close();
    }
    const { rows } = await sql<{
      n: number | string;
    }>`select count(*) as n from events where workspace_id = ${w}`.execute(db);
    expect(Number(rows[0]!.n)).toBe(5);
  });
});

describe.runIf(databaseKind === "postgres")(
  "an id taken by a transaction that commits after a later one",
  () => {
    it(
      "is delivered before the later one, not skipped; a rolled-back id is " +
        "skipped once its transaction ended",
      async () => {
        const db = cp.plane.store.db;
        const w = freshWorkspace();
        const client = new pg.Client({ connectionString: cp.database.location });
        await client.connect();
        try {
          const { rows: before } = await sql<{
            id: number | string | null;
          }>`select max(id) as id from events`.execute(db);
          const start = Number(before[0]!.id ?? 0);
          const query = { workspaceId: w, types: [], afterId: start, pageSize: 100 };
          const pos = { afterId: start, finalThrough: start };

          // Transaction A takes an id and stays open; B takes the next one and commits.
          await client.query("begin");
          await client.query(
            "insert into events (type, workspace_id) values ('workspace.paused', $1)",
            [w],
          );
          expect((await admin.enqueue({ workspaceId: w })).status).toBe(200);
          const held = await readEvents(db, query, pos);
          expect([held.entries.length, held.open]).toEqual([0, true]);
          const heldAgain = await readEvents(db, query, held.pos);
          expect([heldAgain.entries.length, heldAgain.open]).toEqual([0, true]);

          await client.query("commit");
          const read = await readEvents(db, query, heldAgain.pos);
          expect(read.entries.map((e) => e.type)).toEqual(["workspace.paused", "job.queued"]);

          // A rolled-back id is a gap until its transaction ended, then it is skipped.
          await client.query("begin");
          await client.query(
            "insert into events (type, workspace_id) values ('workspace.resumed', $1)",
            [w],
          );
          expect((await admin.enqueue({ workspaceId: w })).status).toBe(200);
          const gap = await readEvents(db, query, read.pos);
          expect([gap.entries.length, gap.open]).toEqual([0, true]);
          await client.query("rollback");
          // Its transaction ended: the gap waits for those in flight at this read too
          // (src/events/read.ts).
          const confirming = await readEvents(db, query, gap.pos);
          expect([confirming.entries.length, confirming.open]).toEqual([0, true]);
          // Then it is skipped; a transaction of the control plane's own (an audit write, the sweep)
          // in flight at a read holds the gap one read longer, so read on for a bounded while (CI saw
          // one).
          let after = await readEvents(db, query, confirming.pos);
          for (let i = 0; i < 20 && after.entries.length === 0; i++) {
            await new Promise((resolve) => setTimeout(resolve, 50));
            after = await readEvents(db, query, after.pos);
          }
          expect(after.entries.map((e) => e.type)).toEqual(["job.queued"]);
        } finally {
          await client.end();
        }
      },
    );
  },
);

describe.runIf(databaseKind === "postgres")("the event stream across two replicas", () => {
  const pair = useReplicaPair();

  it("a follower on replica A sees the events written through replica B as they commit", async () => {
    const w = "evrep";
    const client = createTestClient(
      FleetService,
      pair.a.url,
      pair.a.pki.ca.certPem,
      await pair.a.pki.service("test-admin"),
      "connect-json",
    );
    const adminB = await adminActor(pair.b);
    const abort = new AbortController();
    const seen: string[] = [];
    const follower = (async () => {
      try {
        for await (const e of client.streamEvents(
          { workspaceId: w, follow: true },
          { signal: abort.signal },
        ))
          seen.push(e.type);
      } catch (err) {
        if (!abort.signal.aborted) throw err;
      }
    })();
    for (let i = 0; i < 3; i++) {
      expect((await adminB.enqueue({ workspaceId: w })).status).toBe(200);
      // Each event reaches the follower on A before the next one is written on B.
      await eventually(`event ${i + 1} on replica A`, async () =>
        seen.length === i + 1 ? true : undefined,
      );
    }
    expect(
      (await adminB.rest.request("POST", `/v1/admin/workspaces/${w}/pause`, { apiVersion: "v1" }))
        .status,
    ).toBe(200);
    await eventually("the pause on replica A", async () => (seen.length === 4 ? true : undefined));
    abort.abort();
    await follower;
    expect(seen).toEqual(["job.queued", "job.queued", "job.queued", "workspace.paused"]);
    await adminB.close();
  });
});
