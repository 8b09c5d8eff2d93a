import { describe, expect, it } from "vitest";
import type { AuditRecord, AuditSink } from "../../src/identity/audit.js";
import { aggregateRefusals } from "../../src/identity/audit-aggregation.js";

function memorySink(): AuditSink & { records: AuditRecord[] } {
  const records: AuditRecord[] = [];
  return {
    records,
    record: (r) => void records.push(r),
    unavailable: () => undefined,
    backlog: () => ({
      inMemory: 0,
      spooled: 0,
      spoolBytes: 0,
      spoolPath: "",
      spoolHolder: "",
      quarantined: 0,
      quarantinedHere: 0,
      quarantinePath: "",
      spoolUnreadable: undefined,
      oldestUnwritten: undefined,
    }),
    flush: async () => {},
    close: async () => {},
  };
}

const deny = (ms: number, overrides: Partial<AuditRecord> = {}): AuditRecord => ({
  at: new Date(ms),
  route: "POST /v1/runner/claim",
  decision: "deny",
  reason: "no certificate",
  remoteAddress: "10.0.0.1",
  ...overrides,
});

describe("refusal aggregation", () => {
  it(
    "the first refusal of a kind from a source is written at once; its " +
      "repeats become one record with count, first and last time",
    async () => {
      const inner = memorySink();
      const sink = aggregateRefusals(inner, { intervalMs: 60_000 });
      for (let i = 0; i < 5; i++)
        sink.record(deny(1000 + i, { route: `GET /v1/admin/jobs/j${i}` }));
      expect(inner.records).toEqual([deny(1000, { route: "GET /v1/admin/jobs/j0" })]);
      await sink.flush();
      expect(inner.records[1]).toEqual({
        ...deny(1001, { route: "GET /v1/admin/jobs/j1" }),
        count: 4,
        lastAt: new Date(1004),
      });
      await sink.close();
    },
  );

  it("other sources, other reasons and allowed decisions are not folded in", async () => {
    const inner = memorySink();
    const sink = aggregateRefusals(inner, { intervalMs: 60_000 });
    const cert = {
      serialHex: "01",
      fingerprintSha256: "ab",
      notBefore: new Date(0),
      notAfter: new Date(1),
    };
    sink.record(deny(1));
    sink.record(deny(2, { remoteAddress: "10.0.0.2" }));
    sink.record(deny(3, { reason: "expired" }));
    sink.record(deny(4, { certificate: cert }));
    // same certificate from elsewhere: the same source
    sink.record(deny(5, { certificate: cert, remoteAddress: "10.0.0.9" }));
    sink.record({ ...deny(6), decision: "allow" });
    sink.record({ ...deny(7), decision: "allow" });
    await sink.close();
    expect(inner.records.map((r) => [r.at.getTime(), r.count ?? 1])).toEqual([
      [1, 1],
      [2, 1],
      [3, 1],
      [4, 1],
      [6, 1],
      [7, 1],
      [5, 1],
    ]);
  });
});
