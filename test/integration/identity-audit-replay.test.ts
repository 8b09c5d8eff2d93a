import { randomUUID } from "node:crypto";
import { appendFile, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { createDatabaseAuditSink } from "../../src/identity/audit.js";
import { auditSpoolFile } from "../../src/identity/audit-spool.js";
import { openStore, type Store } from "../../src/store/database.js";
import { createTestDatabase, databaseKind, type TestDatabase } from "../support/database.js";

// Exactly once across a crash: a process died after some spooled rows were
// stored and before the spool was emptied, in the middle of an append. The
// next start writes what the spool holds first, in order; rows already
// stored are skipped by their record id; the torn line is moved to the
// quarantine file beside the spool.

let database: TestDatabase;
let store: Store;
beforeAll(async () => {
  database = await createTestDatabase();
  store = await openStore(database.location);
  vi.spyOn(console, "error").mockImplementation(() => {});
});
afterAll(async () => {
  vi.restoreAllMocks();
  await store?.close();
  await database?.drop();
});

describe(`replaying the audit spool after a crash (${databaseKind})`, () => {
  it("writes every spooled record once, in order, before new ones, and empties the spool", async () => {
    const dir = await mkdtemp(join(tmpdir(), "forelead-replay-"));
    const row = (i: number) => ({
      record_id: randomUUID(),
      at: new Date(Date.UTC(2026, 0, 1, 0, 0, i)).toISOString(),
      kind: "decision",
      route: `GET /v1/admin/jobs/replay-${i}`,
      decision: "allow",
      reason: "admin test",
      count: 1,
    });
    const rows = Array.from({ length: 8 }, (_, i) => row(i));
    // Rows 0-2 were stored before the crash; the spool still holds them all, and a torn line.
    await store.db
      .insertInto("audit_records")
      .values(rows.slice(0, 3) as never)
      .execute();
    await writeFile(join(dir, auditSpoolFile), rows.map((r) => `${JSON.stringify(r)}\n`).join(""));
    await appendFile(join(dir, auditSpoolFile), JSON.stringify(row(99)).slice(0, 40));
    try {
      const sink = await createDatabaseAuditSink(store.db, { spoolDir: dir });
      expect(sink.backlog()).toMatchObject({ spooled: 8, oldestUnwritten: new Date(rows[0]!.at) });
      sink.record({
        at: new Date(),
        route: "GET /v1/admin/jobs/replay-new",
        decision: "allow",
        reason: "admin test",
      });
      await sink.close();
      const stored = await store.db
        .selectFrom("audit_records")
        .select(["route", "record_id"])
        .where("route", "like", "GET /v1/admin/jobs/replay-%")
        .orderBy("id")
        .execute();
      expect(stored.map((r) => r.route)).toEqual([
        ...rows.map((r) => r.route),
        "GET /v1/admin/jobs/replay-new",
      ]);
      expect(new Set(stored.map((r) => r.record_id)).size).toBe(stored.length);
      expect(await readFile(join(dir, auditSpoolFile), "utf8")).toBe("");
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it(
    "stores a record whose text Postgres cannot hold as such (a lone " +
      "surrogate, a NUL) with U+FFFD in its place, and the records beside it",
    async () => {
      const dir = await mkdtemp(join(tmpdir(), "forelead-odd-text-"));
      try {
        const sink = await createDatabaseAuditSink(store.db, { spoolDir: dir });
        sink.record({
          at: new Date(),
          route: "GET /v1/admin/jobs/odd-before",
          decision: "allow",
          reason: "admin test",
        });
        sink.record({
          at: new Date(),
          route: "GET /v1/admin/jobs/odd-text",
          decision: "deny",
          reason: "target a\ud800b c\u0000d",
          target: "\udfff",
        });
        sink.record({
          at: new Date(),
          route: "GET /v1/admin/jobs/odd-after",
          decision: "allow",
          reason: "admin test",
        });
        await sink.close();
        const stored = await store.db
          .selectFrom("audit_records")
          .select(["route", "reason", "target"])
          .where("route", "like", "GET /v1/admin/jobs/odd-%")
          .orderBy("id")
          .execute();
        expect(stored).toEqual([
          { route: "GET /v1/admin/jobs/odd-before", reason: "admin test", target: null },
          {
            route: "GET /v1/admin/jobs/odd-text",
            reason: "target a\ufffdb c\ufffdd",
            target: "\ufffd",
          },
          { route: "GET /v1/admin/jobs/odd-after", reason: "admin test", target: null },
        ]);
        expect(sink.backlog()).toMatchObject({ inMemory: 0, spooled: 0 });
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    },
  );
});
