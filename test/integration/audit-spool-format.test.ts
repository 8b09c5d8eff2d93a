// Issue 45, "the audit spool must heal": a spool line that is not a whole
// audit row (an append cut by a crash at any byte, two appends run into one
// line, a line that is not an audit row) is moved to the quarantine file
// beside the spool with one log line and a metric; every whole row around it
// is stored once; the replica serves at once; doctor and status show the
// spool's path, holder, backlog and what was set aside.
import { randomUUID } from "node:crypto";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Kysely } from "kysely";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import type { Database } from "../../src/store/schema.js";
import { createDatabaseAuditSink } from "../../src/identity/audit.js";
import { auditQuarantineFile, auditSpoolFile } from "../../src/identity/audit-spool.js";
import { adminActor, eventually } from "../support/actors.js";
import { startTestControlPlane } from "../support/control-plane.js";
import { databaseKind } from "../support/database.js";
import { scrape } from "../support/metrics.js";
import { useTestStore } from "../support/store.js";

const store = useTestStore();
const printed: string[] = [];
beforeAll(() => {
  vi.spyOn(console, "error").mockImplementation(
    (...args: unknown[]) => void printed.push(args.map(String).join(" ")),
  );
});
afterAll(() => vi.restoreAllMocks());

/** A spool line as the sink writes it, for a route of the test's choosing. */
function row(route: string) {
  return {
    record_id: randomUUID(),
    at: new Date().toISOString(),
    kind: "decision",
    route,
    decision: "allow",
    reason: "admin test",
    count: 1,
  };
}
const line = (r: object) => Buffer.from(`${JSON.stringify(r)}\n`);

/** The routes of `rows` stored in the database, by record id, with how often each is there. */
async function storedRoutes(
  rows: readonly { record_id: string }[],
  db: Kysely<Database> = store().db,
): Promise<string[]> {
  if (rows.length === 0) return [];
  const stored = await db
    .selectFrom("audit_records")
    .select(["route"])
    .where(
      "record_id",
      "in",
      rows.map((r) => r.record_id),
    )
    .orderBy("id")
    .execute();
  return stored.map((r) => r.route);
}

/**
 * Opens a sink on a spool holding `bytes`, closes it (which writes what it holds); the quarantine
 * file after.
 */
async function drainSpool(bytes: Buffer): Promise<{ quarantine: string; spool: string }> {
  const dir = await mkdtemp(join(tmpdir(), "forelead-spool-cut-"));
  try {
    await writeFile(join(dir, auditSpoolFile), bytes);
    const sink = await createDatabaseAuditSink(store().db, { spoolDir: dir });
    await sink.close();
    return {
      quarantine: await readFile(join(dir, auditQuarantineFile), "utf8").catch(() => ""),
      spool: await readFile(join(dir, auditSpoolFile), "utf8"),
    };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

describe(`a spool cut at every byte offset (${databaseKind})`, () => {
  it(
    "a file ending at any byte: every whole row is stored once, the cut one " +
      "is quarantined, the spool is emptied",
    async () => {
      // Two rows: every cut falls in the first, at the boundary, or in the second behind a whole one.
      const rows = [row("cut-a"), row("cut-b")];
      const lines = rows.map(line);
      const file = Buffer.concat(lines);
      const ends = lines.map((_, i) => Buffer.concat(lines.slice(0, i + 1)).length);
      for (let cut = 0; cut <= file.length; cut++) {
        const fresh = rows.map((r) => ({ ...r, record_id: randomUUID() }));
        const bytes = Buffer.concat(fresh.map(line)).subarray(0, cut);
        const whole = ends.filter((end) => end <= cut).length;
        const { quarantine, spool } = await drainSpool(bytes);
        const at = `cut at byte ${cut}`;
        expect(await storedRoutes(fresh), at).toEqual(fresh.slice(0, whole).map((r) => r.route));
        const torn = bytes.subarray(whole === 0 ? 0 : ends[whole - 1]!);
        expect(quarantine, at).toBe(torn.length > 0 ? `${torn.toString("utf8")}\n` : "");
        expect(spool, at).toBe("");
      }
    },
    120_000,
  );

  it(
    "a row cut at any byte with the next append run into it: the rows before " +
      "and after are stored once, the cut part is quarantined",
    async () => {
      const probe = line(row("run-b"));
      for (let cut = 0; cut < probe.length; cut++) {
        const [a, b, c] = [row("run-a"), row("run-b"), row("run-c")];
        const bytes = Buffer.concat([line(a), line(b).subarray(0, cut), line(c)]);
        const { quarantine, spool } = await drainSpool(bytes);
        const at = `row b cut at byte ${cut}`;
        // Cut right before its newline, b is whole and is stored too.
        const bWhole = cut === probe.length - 1;
        expect(await storedRoutes([a, b, c]), at).toEqual(
          bWhole ? ["run-a", "run-b", "run-c"] : ["run-a", "run-c"],
        );
        expect(quarantine, at).toBe(
          cut === 0 || bWhole ? "" : `${line(b).subarray(0, cut).toString("utf8")}\n`,
        );
        expect(spool, at).toBe("");
      }
    },
    120_000,
  );
});

describe(`a replica starting on a corrupted spool (${databaseKind})`, () => {
  it(
    "serves at once, stores the good rows once, quarantines the rest with " +
      "one log line and a metric, and doctor and status show the spool's path, " +
      "holder, backlog and quarantined records",
    async () => {
      const dir = await mkdtemp(join(tmpdir(), "forelead-spool-bad-"));
      const good = [row("GET /v1/admin/jobs/bad-1"), row("GET /v1/admin/jobs/bad-2")];
      const notARow = JSON.stringify({ record_id: "not-a-uuid", route: "x" });
      await writeFile(
        join(dir, auditSpoolFile),
        Buffer.concat([
          line(good[0]!),
          Buffer.from("{this is not json\n"),
          Buffer.from(`${notARow}\n`),
          line(good[1]!),
          Buffer.from('{"record_id":"0'),
        ]),
      );
      const printedBefore = printed.length;
      const cp = await startTestControlPlane({
        auditSpoolDir: dir,
        metricsListen: { host: "127.0.0.1", port: 0 },
      });
      const admin = await adminActor(cp);
      try {
        const jobs = await admin.rest.request("GET", "/v1/admin/jobs?workspaceId=w1");
        expect(jobs.status, jobs.text).toBe(200);
        await eventually("the spool drained", async () =>
          cp.plane.audit.backlog().spooled === 0 ? true : undefined,
        );
        const reply = await admin.rest.request("GET", "/v1/admin/status");
        expect(reply.status, reply.text).toBe(200);
        const database = reply.json.database;
        expect(database).toMatchObject({
          auditSpoolPath: join(dir, auditSpoolFile),
          auditSpoolHolder: expect.stringMatching(
            new RegExp(`^pid ${process.pid} on \\S+, started \\d{4}-`),
          ),
          auditSpoolQuarantinedRecords: "3",
          auditSpoolQuarantinePath: join(dir, auditQuarantineFile),
        });
        // proto3 JSON leaves out a zero: nothing waits in the spool.
        expect(database.auditSpoolRecords).toBeUndefined();
        expect(await storedRoutes(good, cp.plane.store.db)).toEqual(good.map((r) => r.route));
        expect(await readFile(join(dir, auditQuarantineFile), "utf8")).toBe(
          `{"record_id":"0\n{this is not json\n${notARow}\n`,
        );
        const log = printed.slice(printedBefore).filter((l) => l.includes(auditQuarantineFile));
        // One line for the torn last line (cut off when the spool opens), one for the two bad lines
        // read in the middle.
        expect(log, log.join("\n")).toHaveLength(2);
        expect(log[0]).toContain("moved 1 unreadable line(s)");
        expect(log[1]).toContain("moved 2 unreadable line(s)");

        const metrics = await scrape(cp.plane.metrics!.url);
        expect(metrics.value("forelead_audit_spool_quarantined_records_total")).toBe(3);
        expect(metrics.value("forelead_audit_spool_quarantine_records")).toBe(3);
        expect(metrics.value("forelead_audit_writable")).toBe(1);

        const doctor = await admin.rest.request("GET", "/v1/admin/doctor");
        expect(doctor.status, doctor.text).toBe(200);
        const check = doctor.json.checks.find((c: { name: string }) => c.name === "audit backlog");
        expect(check.status).toBe("warn");
        expect(check.detail).toContain(
          `3 lines set aside in ${join(dir, auditQuarantineFile)} (not whole audit ` +
            `records); spool ${join(dir, auditSpoolFile)} held by pid ${process.pid}`,
        );
      } finally {
        await admin.close();
        await cp.close();
        await rm(dir, { recursive: true, force: true });
      }
    },
    60_000,
  );
});
