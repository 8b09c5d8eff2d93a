// Runner inventory and reap orders over the real server (HTTP/2 + TLS 1.3,
// client certificates): what a report may hold, what is kept, what operators
// see, and that an order reaches exactly the runner it names.
import { describe, expect, it } from "vitest";
import { sql } from "kysely";
import { Code, ConnectError } from "@connectrpc/connect";
import { AdminService } from "../../gen/forelead/admin/v1/admin_pb.js";
import { RunnerService } from "../../gen/forelead/runner/v1/runner_pb.js";
import { newJobId } from "../../src/broker/ids.js";
import { containerName, networkName } from "../../src/inventory/names.js";
import { jobBody, runnerActor, type RunnerActor } from "../support/actors.js";
import { createTestClient } from "../support/clients.js";
import { testAdminId } from "../support/control-plane.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";

const cp = useControlPlane();
const { admin } = cp;
let wsCounter = 0;
/** Each test works in workspaces of its own, so tests never see each other's reports. */
const freshWorkspace = () => `inv${++wsCounter}`;

type Item = Record<string, unknown>;

/** An item as the protocol writes it. */
function container(jobId: string, overrides: Item = {}): Item {
  return {
    kind: "container",
    name: containerName(jobId, "main"),
    jobId,
    state: "running",
    image: "busybox",
    createdAt: "2026-11-29T09:29:00Z",
    cpu: 2,
    memory: "2147483648",
    orphan: false,
    ...overrides,
  };
}
function network(jobId: string, overrides: Item = {}): Item {
  return {
    kind: "network",
    name: networkName(jobId),
    jobId,
    state: "created",
    image: "",
    orphan: false,
    ...overrides,
  };
}

const report = (runner: RunnerActor, items: Item[], overrides: Item = {}) =>
  runner.rest.request("POST", "/v1/runner/inventory", {
    apiVersion: "v1",
    runnerId: runner.runnerId,
    items,
    ...overrides,
  });

async function latest(runnerId: string, workspaceId: string) {
  const reply = await admin.rest.request(
    "GET",
    `/v1/admin/inventory?runnerId=${runnerId}&workspaceId=${workspaceId}`,
  );
  expect(reply.status, reply.text).toBe(200);
  return reply.json.reports as Array<Record<string, any>> | undefined; // eslint-disable-line @typescript-eslint/no-explicit-any
}

const orderReap = (body: Item) =>
  admin.rest.request("POST", "/v1/admin/reap-orders", { apiVersion: "v1", ...body });

/** A registered runner holding a live lease on a fresh job of its workspace. */
async function runnerWithJob(runnerId: string, workspaceId: string, timeoutSeconds?: number) {
  const runner = await runnerActor(cp, runnerId, workspaceId);
  expect((await runner.register()).status).toBe(200);
  const enq = await admin.enqueue({
    workspaceId,
    ...(timeoutSeconds ? { spec: { ...(jobBody().spec as object), timeoutSeconds } } : {}),
  });
  expect(enq.status, enq.text).toBe(200);
  const claim = await runner.claim();
  expect(claim.status, claim.text).toBe(200);
  return { runner, jobId: claim.json.job.id as string, token: claim.json.token as string };
}

describe(`runner inventory reports (${databaseKind})`, () => {
  it("a report is stored as the runner's latest, with its time; a later one replaces it", async () => {
    const ws = freshWorkspace();
    const { runner, jobId } = await runnerWithJob("r1", ws);
    const before = Date.now();
    const first = await report(runner, [container(jobId), network(jobId)]);
    expect(first.status, first.text).toBe(200);
    expect(first.json).toEqual({ apiVersion: "v1" }); // no reap orders
    const [stored] = (await latest("r1", ws))!;
    expect(stored).toMatchObject({ runnerId: "r1", workspaceId: ws });
    expect(Date.parse(stored!.reportedAt)).toBeGreaterThanOrEqual(before - 5_000);
    expect(stored!.items).toEqual([
      {
        kind: "container",
        name: containerName(jobId, "main"),
        jobId,
        state: "running",
        image: "busybox",
        createdAt: "2026-11-29T09:29:00Z",
        cpu: 2,
        memory: "2147483648",
      },
      { kind: "network", name: networkName(jobId), jobId, state: "created" },
    ]);
    // a container of a live lease of this runner is what should be there
    expect(stored!.flags).toBeUndefined();

    const second = await report(runner, [container(jobId, { state: "exited" })]);
    expect(second.status, second.text).toBe(200);
    const [replaced] = (await latest("r1", ws))!;
    expect(replaced!.items).toEqual([
      expect.objectContaining({ kind: "container", state: "exited" }),
    ]);
    expect(Date.parse(replaced!.reportedAt)).toBeGreaterThanOrEqual(Date.parse(stored!.reportedAt));
    await runner.close();
  });

  it(
    "an item with a foreign name, an unknown kind, a mismatched job or a " +
      "missing field is refused by index, and nothing of that report is stored",
    async () => {
      const ws = freshWorkspace();
      const runner = await runnerActor(cp, "r1", ws);
      const jobId = newJobId();
      const good = await report(runner, [network(jobId, { orphan: true })]);
      expect(good.status, good.text).toBe(200);
      const kept = (await latest("r1", ws))!;

      const other = newJobId();
      const cases: Array<[string, Item, RegExp]> = [
        [
          "foreign name",
          container(jobId, { name: "postgres" }),
          /items\[1\]: name "postgres" does not start with "forelead-"/,
        ],
        [
          "docker's slash",
          container(jobId, { name: `/${containerName(jobId, "main")}` }),
          /items\[1\]: .*strip Docker's leading/,
        ],
        [
          "bad task",
          container(jobId, { name: `forelead-${jobId}-Main` }),
          /items\[1\]: .*task "Main"/,
        ],
        [
          "network named like a container",
          network(jobId, { name: containerName(jobId, "main") }),
          /items\[1\]: .*not a network name/,
        ],
        [
          "unknown kind",
          container(jobId, { kind: "volume" }),
          /items\[1\]: kind "volume" is not "container" or "network"/,
        ],
        [
          "mismatched job",
          container(jobId, { jobId: other }),
          new RegExp(`items\\[1\\]: jobId "${other}" does not match the job id ${jobId}`),
        ],
        ["missing jobId", container(jobId, { jobId: "" }), /items\[1\]: jobId is required/],
        ["missing kind", container(jobId, { kind: undefined }), /items\[1\]: kind is required/],
        ["missing name", container(jobId, { name: undefined }), /items\[1\]: name is required/],
        [
          "negative memory",
          container(jobId, { memory: "-1" }),
          /items\[1\]: memory must be a non-negative/,
        ],
        [
          "oversized image",
          container(jobId, { image: "x".repeat(1025) }),
          /items\[1\]: image is longer than 1024/,
        ],
        ["listed twice", network(jobId), /items\[1\]: network .* is already listed as items\[0\]/],
      ];
      for (const [what, bad, message] of cases) {
        const reply = await report(runner, [network(jobId), bad, container(newJobId())]);
        expect(reply.status, `${what}: ${reply.text}`).toBe(400);
        expect(reply.json.code, what).toBe("invalid_argument");
        expect(reply.json.message, what).toMatch(message);
        expect(reply.json.message, what).toMatch(/nothing from this report was stored/);
      }
      expect(await latest("r1", ws)).toEqual(kept);
      await runner.close();
    },
  );

  it("a body naming another runner, or no runner, is refused and stores nothing", async () => {
    const ws = freshWorkspace();
    const runner = await runnerActor(cp, "r1", ws);
    const jobId = newJobId();
    const foreign = await report(runner, [network(jobId)], { runnerId: "r2" });
    expect(foreign.status).toBe(403);
    expect(foreign.json).toEqual({
      code: "permission_denied",
      message: `runnerId "r2" does not match the certificate's runner "r1"`,
    });
    const missing = await report(runner, [network(jobId)], { runnerId: undefined });
    expect(missing.status).toBe(400);
    expect(missing.json.message).toMatch(/runnerId is required/);
    expect(await latest("r1", ws)).toBeUndefined();
    expect(await latest("r2", ws)).toBeUndefined();
    await runner.close();
  });

  it(
    "a report of more than 10,000 items is refused (through a generated " +
      "client, where it fits in the body bound)",
    async () => {
      const ws = freshWorkspace();
      const client = createTestClient(
        RunnerService,
        cp.url,
        cp.pki.ca.certPem,
        await cp.pki.runner("big", ws),
        "connect-binary",
      );
      const jobId = newJobId();
      const item = { kind: "network", name: networkName(jobId), jobId };
      const err = await client
        .inventory({
          apiVersion: "v1",
          runnerId: "big",
          items: Array.from({ length: 10_001 }, () => item),
        })
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ConnectError);
      expect((err as ConnectError).code).toBe(Code.InvalidArgument);
      expect((err as ConnectError).rawMessage).toMatch(/10001 items; at most 10000/);
      expect(await latest("big", ws)).toBeUndefined();
    },
  );
});

describe(`cross-checks against leases (${databaseKind})`, () => {
  it(
    "an item of a job not leased to this runner, an orphan of a live lease, " +
      "and a live lease with no container are flagged; normal cleanup is not",
    async () => {
      const ws = freshWorkspace();
      // A timeout far past the 10 minutes its lease is aged below: else the sweep may fail the job
      // as overdue (timeout + grace) between that update and the report, and nothing is live to flag.
      const { runner, jobId: live } = await runnerWithJob("r1", ws, 3600);
      const { runner: r2, jobId: elsewhere } = await runnerWithJob("r2", ws);
      // A job r1 ran and completed just now: its leftovers are normal while the runner cleans up.
      const { runner: r3, jobId: finished, token } = await runnerWithJob("r3", ws);
      expect((await r3.complete(finished, token)).status).toBe(200);
      const unknown = newJobId();

      const clean = await report(runner, [container(live), network(live)]);
      expect(clean.status, clean.text).toBe(200);
      expect((await latest("r1", ws))![0]!.flags).toBeUndefined();

      const mixed = await report(runner, [
        container(elsewhere), // r2's job, not called orphan
        container(unknown), // not a job of this workspace
        container(live, { orphan: true }), // called orphan while r1's lease on it is live
        // an orphan of another runner's job: what orphans are, not flagged
        network(elsewhere, { orphan: true }),
      ]);
      expect(mixed.status, mixed.text).toBe(200);
      const flags = (await latest("r1", ws))![0]!.flags as Array<Record<string, string>>;
      expect(flags).toEqual(
        expect.arrayContaining([
          expect.objectContaining({
            problem: "job_not_leased_here",
            jobId: elsewhere,
            kind: "container",
            name: containerName(elsewhere, "main"),
            message: expect.stringMatching(/leased to runner "r2"/),
          }),
          expect.objectContaining({
            problem: "job_not_leased_here",
            jobId: unknown,
            message: expect.stringMatching(/not a job of workspace/),
          }),
          expect.objectContaining({
            problem: "orphan_of_live_lease",
            jobId: live,
            name: containerName(live, "main"),
          }),
        ]),
      );
      expect(flags).toHaveLength(3); // the lease is young: no container yet is normal for two minutes

      // The same report once r1's lease is old enough to have a container: now the lease is flagged
      // too.
      await sql`update leases set issued_at = now() - interval '10 minutes' where job_id = ${live}`.execute(
        cp.plane.store.db,
      );
      expect((await report(runner, [container(live, { orphan: true })])).status).toBe(200);
      const later = (await latest("r1", ws))![0]!.flags as Array<Record<string, string>>;
      expect(later.map((f) => f.problem).sort()).toEqual([
        "lease_without_container",
        "orphan_of_live_lease",
      ]);
      expect(later.find((f) => f.problem === "lease_without_container")).toMatchObject({
        jobId: live,
        message: expect.stringMatching(/no container/),
      });

      // r3 still lists the container of the job it completed a moment ago: not flagged.
      expect((await report(r3, [container(finished, { state: "exited" })])).status).toBe(200);
      expect((await latest("r3", ws))![0]!.flags).toBeUndefined();
      // ...but long after its lease ended, it is.
      await sql`update leases set ended_at = now() - interval '1 hour' where job_id = ${finished}`.execute(
        cp.plane.store.db,
      );
      expect((await report(r3, [container(finished, { state: "exited" })])).status).toBe(200);
      expect((await latest("r3", ws))![0]!.flags).toEqual([
        expect.objectContaining({
          problem: "job_not_leased_here",
          jobId: finished,
          message: expect.stringMatching(/is succeeded/),
        }),
      ]);
      await Promise.all([runner.close(), r2.close(), r3.close()]);
    },
  );
});

describe(`reap orders (${databaseKind})`, () => {
  it("an order for an item the latest report does not call orphan, or does not list, is refused", async () => {
    const ws = freshWorkspace();
    const runner = await runnerActor(cp, "r1", ws);
    const jobId = newJobId();
    expect(
      (await report(runner, [container(jobId), network(jobId, { orphan: true })])).status,
    ).toBe(200);

    const notOrphan = await orderReap({
      runnerId: "r1",
      workspaceId: ws,
      kind: "container",
      name: containerName(jobId, "main"),
    });
    expect(notOrphan.status).toBe(400);
    expect(notOrphan.json.code).toBe("failed_precondition");
    expect(notOrphan.json.message).toMatch(/does not call container .* an orphan/);
    const notListed = await orderReap({
      runnerId: "r1",
      workspaceId: ws,
      kind: "container",
      name: containerName(jobId, "db"),
    });
    expect(notListed.status).toBe(400);
    expect(notListed.json.message).toMatch(/does not list container/);
    const wrongKind = await orderReap({
      runnerId: "r1",
      workspaceId: ws,
      kind: "container",
      name: networkName(jobId),
    });
    expect(wrongKind.status).toBe(400);
    const noReport = await orderReap({
      runnerId: "r9",
      workspaceId: ws,
      kind: "network",
      name: networkName(jobId),
    });
    expect(noReport.status).toBe(404);
    expect(noReport.json.message).toMatch(
      /"r9" in workspace "inv\d+" has sent no inventory report/,
    );

    expect(
      (await admin.rest.request("GET", `/v1/admin/reap-orders?workspaceId=${ws}`)).json.orders,
    ).toBeUndefined();
    // A runner certificate cannot order anything.
    const asRunner = await runner.rest.request("POST", "/v1/admin/reap-orders", {
      apiVersion: "v1",
      runnerId: "r1",
      workspaceId: ws,
      kind: "network",
      name: networkName(jobId),
    });
    expect(asRunner.status).toBe(403);
    await runner.close();
  });

  it(
    "an order is recorded with who ordered it, delivered in the next reply, " +
      "and done once a later report no longer lists the item",
    async () => {
      const ws = freshWorkspace();
      const runner = await runnerActor(cp, "solo", ws);
      const jobId = newJobId();
      const orphan = network(jobId, { orphan: true });
      expect((await report(runner, [orphan])).status).toBe(200);

      const orphans = await admin.rest.request("GET", `/v1/admin/orphans?workspaceId=${ws}`);
      expect(orphans.json.orphans).toEqual([
        expect.objectContaining({
          runnerId: "solo",
          workspaceId: ws,
          item: expect.objectContaining({ name: networkName(jobId), orphan: true }),
        }),
      ]);

      const ordered = await orderReap({
        runnerId: "solo",
        kind: "network",
        name: networkName(jobId),
      }); // workspace inferred: "solo" reports in one only
      expect(ordered.status, ordered.text).toBe(200);
      expect(ordered.json.order).toMatchObject({
        runnerId: "solo",
        workspaceId: ws,
        kind: "network",
        name: networkName(jobId),
        jobId,
        orderedBy: testAdminId,
        state: "pending",
      });
      expect(Date.parse(ordered.json.order.orderedAt)).toBeGreaterThan(0);
      const again = await orderReap({
        runnerId: "solo",
        workspaceId: ws,
        kind: "network",
        name: networkName(jobId),
      });
      expect(again.json.order.id).toBe(ordered.json.order.id); // ordering twice is the same order

      const pending = (await latest("solo", ws))![0]!.pendingOrders;
      expect(pending).toEqual([
        expect.objectContaining({ id: ordered.json.order.id, state: "pending" }),
      ]);

      const delivered = await report(runner, [orphan]);
      expect(delivered.json).toEqual({
        apiVersion: "v1",
        reap: [{ kind: "network", name: networkName(jobId) }],
      });
      // Until the runner removes it, every reply repeats the order.
      expect((await report(runner, [orphan])).json.reap).toEqual([
        { kind: "network", name: networkName(jobId) },
      ]);

      const removed = await report(runner, []);
      expect(removed.json).toEqual({ apiVersion: "v1" });
      const done = await admin.rest.request("GET", `/v1/admin/reap-orders?workspaceId=${ws}`);
      expect(done.json.orders).toEqual([
        expect.objectContaining({
          id: ordered.json.order.id,
          state: "done",
          orderedBy: testAdminId,
          settledAt: expect.any(String),
        }),
      ]);
      expect((await latest("solo", ws))![0]!.pendingOrders).toBeUndefined();
      await runner.close();
    },
  );

  it("an order expires when a later report no longer calls the item orphan, and is not delivered", async () => {
    const ws = freshWorkspace();
    const runner = await runnerActor(cp, "r1", ws);
    const jobId = newJobId();
    expect((await report(runner, [container(jobId, { orphan: true })])).status).toBe(200);
    const ordered = await orderReap({
      runnerId: "r1",
      workspaceId: ws,
      kind: "container",
      name: containerName(jobId, "main"),
    });
    expect(ordered.status, ordered.text).toBe(200);
    const reply = await report(runner, [container(jobId, { orphan: false })]);
    expect(reply.json).toEqual({ apiVersion: "v1" });
    const orders = await admin.rest.request(
      "GET",
      `/v1/admin/reap-orders?workspaceId=${ws}&state=expired`,
    );
    expect(orders.json.orders).toEqual([
      expect.objectContaining({ id: ordered.json.order.id, state: "expired" }),
    ]);
    // Called orphan again later: the expired order stays expired; a new order is needed.
    expect((await report(runner, [container(jobId, { orphan: true })])).json.reap).toBeUndefined();
    await runner.close();
  });

  it("orders are never delivered to another runner or to the same runner id in another workspace", async () => {
    const wsA = freshWorkspace();
    const wsB = freshWorkspace();
    const jobId = newJobId();
    const orphan = container(jobId, { orphan: true });
    const r1a = await runnerActor(cp, "r1", wsA);
    const r2a = await runnerActor(cp, "r2", wsA);
    const r1b = await runnerActor(cp, "r1", wsB);
    for (const r of [r1a, r2a, r1b]) expect((await report(r, [orphan])).status).toBe(200);

    const ambiguous = await orderReap({
      runnerId: "r1",
      kind: "container",
      name: containerName(jobId, "main"),
    });
    expect(ambiguous.status).toBe(400);
    expect(ambiguous.json.message).toMatch(/reports in workspaces .*; give workspaceId/);
    const ordered = await orderReap({
      runnerId: "r1",
      workspaceId: wsA,
      kind: "container",
      name: containerName(jobId, "main"),
    });
    expect(ordered.status, ordered.text).toBe(200);

    expect((await report(r2a, [orphan])).json.reap).toBeUndefined();
    expect((await report(r1b, [orphan])).json.reap).toBeUndefined();
    // A body cannot pick the workspace: the inventory request has no such field, so it is ignored.
    const sneaky = await report(r1b, [orphan], { workspaceId: wsA });
    expect(sneaky.status).toBe(200);
    expect(sneaky.json.reap).toBeUndefined();
    expect((await report(r1a, [orphan])).json.reap).toEqual([
      { kind: "container", name: containerName(jobId, "main") },
    ]);
    await Promise.all([r1a.close(), r2a.close(), r1b.close()]);
  });

  it("the whole order cycle through generated clients", async () => {
    const ws = freshWorkspace();
    const runner = createTestClient(
      RunnerService,
      cp.url,
      cp.pki.ca.certPem,
      await cp.pki.runner("g1", ws),
      "connect-binary",
    );
    const adminClient = createTestClient(
      AdminService,
      cp.url,
      cp.pki.ca.certPem,
      await cp.pki.service("test-admin"),
      "grpc",
    );
    const jobId = newJobId();
    const item = {
      kind: "container",
      name: containerName(jobId, "main"),
      jobId,
      state: "exited",
      image: "busybox",
      memory: 1n << 40n,
      cpu: 0.5,
      orphan: true,
    };
    expect(
      (await runner.inventory({ apiVersion: "v1", runnerId: "g1", items: [item] })).reap,
    ).toEqual([]);
    const { orphans } = await adminClient.listOrphans({ workspaceId: ws });
    expect(orphans.map((o) => [o.runnerId, o.item?.name, o.item?.memory, o.item?.cpu])).toEqual([
      ["g1", item.name, 1n << 40n, 0.5],
    ]);
    const { order } = await adminClient.orderReap({
      apiVersion: "v1",
      runnerId: "g1",
      workspaceId: ws,
      kind: "container",
      name: item.name,
    });
    expect(order).toMatchObject({ state: "pending", orderedBy: testAdminId });
    const { reap } = await runner.inventory({ apiVersion: "v1", runnerId: "g1", items: [item] });
    expect(reap.map((r) => [r.kind, r.name])).toEqual([["container", item.name]]);
    await runner.inventory({ apiVersion: "v1", runnerId: "g1", items: [] });
    const { orders } = await adminClient.listReapOrders({ workspaceId: ws });
    expect(orders.map((o) => [o.id, o.state])).toEqual([[order!.id, "done"]]);
    const { reports } = await adminClient.listInventory({ runnerId: "g1", workspaceId: ws });
    expect(reports.map((r) => [r.runnerId, r.items.length, r.pendingOrders.length])).toEqual([
      ["g1", 0, 0],
    ]);
  });
});
