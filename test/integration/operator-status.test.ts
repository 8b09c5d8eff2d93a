// GET /v1/admin/status (issue 17 item 1): the numbers of a known fleet and
// queue, checked exactly, and every live replica listed.
import { X509Certificate } from "node:crypto";
import { sql } from "kysely";
import { describe, expect, it } from "vitest";
import { migrations } from "../../src/store/migrations/index.js";
import { eventually, registeredRunner } from "../support/actors.js";
import { startTestControlPlane } from "../support/control-plane.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane, useReplicaPair } from "../support/fixture.js";
import { createRestClient } from "../support/clients.js";

const GiB = 2 ** 30;
const MiB = 2 ** 20;

describe("GET /v1/admin/status", () => {
  const cp = useControlPlane();

  it("counts a known fleet and queue exactly: runners, pool, workspaces, expiring certificates", async () => {
    const { admin } = cp;
    const db = cp.plane.store.db;
    const r1 = await registeredRunner(cp, "r1", "w1", {
      slots: 2,
      cpu: 4,
      memoryBytes: String(4 * GiB),
    });
    await registeredRunner(cp, "r2", "w1", { slots: 1, cpu: 2, memoryBytes: String(GiB) });
    await registeredRunner(cp, "r3", "w1", { slots: 1, cpu: 8, memoryBytes: String(8 * GiB) });
    await registeredRunner(cp, "r4", "w1", { slots: 1, cpu: 1, memoryBytes: String(GiB) });
    // Registered, but not heard from within the offline threshold (90 s): offline, not in the pool.
    await registeredRunner(cp, "r5", "w1", { slots: 4, cpu: 16, memoryBytes: String(16 * GiB) });
    await sql`update runners set last_seen_at = now() - interval '91 seconds' where runner_id = 'r5'`.execute(
      db,
    );
    const retire = await admin.rest.request("POST", "/v1/admin/runners/r3/retire", {
      apiVersion: "v1",
      workspaceId: "w1",
      reason: "test",
    });
    expect(retire.status, retire.text).toBe(200);
    // The pause routes are another part's; the status only reads the pause state.
    await db
      .updateTable("runners")
      .set({ paused_at: new Date(), paused_by: "test" })
      .where("runner_id", "=", "r2")
      .execute();
    await db
      .insertInto("workspace_pauses")
      .values([
        { workspace_id: "w2", paused_by: "test" },
        { workspace_id: "w3", paused_by: "test" },
      ])
      .execute();
    for (let i = 0; i < 3; i++)
      expect(
        (
          await admin.enqueue({
            workspaceId: "w1",
            spec: { image: "busybox", argv: ["true"], cpu: 1, memoryBytes: String(512 * MiB) },
          })
        ).status,
      ).toBe(200);
    for (let i = 0; i < 2; i++)
      expect((await admin.enqueue({ workspaceId: "w2" })).status).toBe(200);
    const claim = await r1.claim();
    expect(claim.status, claim.text).toBe(200);
    const now = Date.now();
    const cert = (serial: string, notAfterMs: number) => ({
      serial,
      spiffe_id: `spiffe://forelead/runners/${serial}/workspaces/w1`,
      workspace_id: "w1",
      runner_id: serial,
      not_before: new Date(now - 3600_000),
      not_after: new Date(notAfterMs),
      issued_via: "enroll" as const,
      sha256: serial.padEnd(64, "0"),
    });
    await db
      .insertInto("issued_certificates")
      .values([
        cert("c-expired", now - 60_000),
        cert("c-2h", now + 2 * 3600_000),
        cert("c-1h", now + 3600_000),
        cert("c-48h", now + 48 * 3600_000),
      ])
      .execute();

    const reply = await admin.rest.request("GET", "/v1/admin/status");
    expect(reply.status, reply.text).toBe(200);
    const s = reply.json;
    expect(s.runners).toEqual({
      registered: "5",
      connected: "3",
      busy: "1",
      idle: "1",
      paused: "1",
      retired: "1",
      offline: "1",
    });
    // Connected runners r1, r2 and r4; only the busy r1 and the idle r4 have free capacity (the
    // paused r2's is not free); one live lease holds a slot, 1 CPU and 512 MiB of r1's.
    expect(s.pool).toEqual({
      slotsTotal: "4",
      slotsFree: "2",
      cpuTotal: "7",
      cpuFree: "4",
      memoryBytesTotal: String(6 * GiB),
      memoryBytesFree: String(5 * GiB - 512 * MiB),
    });
    expect(s.workspaces).toEqual([
      { workspaceId: "w1", queued: "2", running: "1", oldestQueuedSeconds: expect.any(Number) },
      { workspaceId: "w2", queued: "2", oldestQueuedSeconds: expect.any(Number), paused: true },
      { workspaceId: "w3", paused: true },
    ]);
    expect(s.workspaces[0].oldestQueuedSeconds).toBeGreaterThan(0);
    expect(s.certificates.expiringWithin24h).toBe("2");
    expect(s.certificates.expiring.map((c: { serial: string }) => c.serial)).toEqual([
      "c-1h",
      "c-2h",
    ]);
    expect(Date.parse(s.certificates.serverNotAfter)).toBe(
      Date.parse(new X509Certificate(cp.pki.server.certPem).validTo),
    );
    expect(s.database).toMatchObject({
      kind: databaseKind === "embedded" ? "pglite" : "postgres",
      reachable: true,
      migration: Object.keys(migrations).at(-1),
      listenConnected: true,
    });
    expect(s.database.roundTripMs).toBeGreaterThan(0);
    expect(s.build.version).toMatch(/^\d+\.\d+\.\d+/);
    expect(s.build.commit).toMatch(/^([0-9a-f]{40}|unknown)$/);
    expect(s.replicas).toEqual([
      {
        id: expect.any(String),
        host: expect.any(String),
        pid: process.pid,
        version: s.build.version,
        startedAt: s.startedAt,
        lastSeenAt: expect.any(String),
      },
    ]);
    await sql`delete from issued_certificates`.execute(db);
  });

  it("the replica's heartbeat moves its last_seen_at while it runs", async () => {
    const replica = async () =>
      (await cp.admin.rest.request("GET", "/v1/admin/status")).json.replicas[0] as {
        startedAt: string;
        lastSeenAt: string;
      };
    const first = await replica();
    const later = await eventually("a heartbeat after the first", async () => {
      const r = await replica();
      return Date.parse(r.lastSeenAt) > Date.parse(first.lastSeenAt) ? r : undefined;
    });
    expect(later.startedAt).toBe(first.startedAt);
  });

  it("needs the read role: an identity without a grant is refused", async () => {
    const stranger = createRestClient(cp.url, cp.pki.ca.certPem, await cp.pki.service("stranger"));
    try {
      const reply = await stranger.request("GET", "/v1/admin/status");
      expect(reply.status, reply.text).toBe(403);
    } finally {
      await stranger.close();
    }
  });
});

// Two replicas need one shared database; embedded databases are private to one process.
describe.skipIf(databaseKind !== "postgres")(
  "replicas in the status (Postgres only: embedded databases are not shared)",
  () => {
    const pair = useReplicaPair();

    it("lists every live replica from either one, and a replica that stops cleanly leaves the list", async () => {
      const ids = async (url: string) => {
        const client = createRestClient(
          url,
          pair.a.pki.ca.certPem,
          await pair.a.pki.service("test-admin"),
        );
        try {
          const reply = await client.request("GET", "/v1/admin/status");
          expect(reply.status, reply.text).toBe(200);
          return (reply.json.replicas as Array<{ id: string }>).map((r) => r.id).sort();
        } finally {
          await client.close();
        }
      };
      const third = await startTestControlPlane({ pki: pair.a.pki, database: pair.a.database });
      const withThird = await ids(pair.a.url);
      expect(withThird).toHaveLength(3);
      expect(await ids(pair.b.url)).toEqual(withThird);
      await third.close();
      expect(await ids(pair.b.url)).toHaveLength(2);
    });
  },
);
