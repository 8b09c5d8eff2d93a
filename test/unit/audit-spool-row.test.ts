import { randomUUID } from "node:crypto";
import { describe, expect, it } from "vitest";
import { isAuditRow } from "../../src/identity/audit.js";

// A spool line the database would refuse fails its whole batch, and every row behind it, so
// the spool quarantines it instead: isAuditRow says which lines are rows the database takes.
const row = {
  record_id: randomUUID(),
  at: "2026-01-01T00:00:00.000Z",
  kind: "action",
  action: "job.enqueue",
  target: "job 1 in workspace w1",
  route: "POST /v1/admin/jobs",
  decision: "allow",
  reason: "admin",
  spiffe_id: "spiffe://forelead/services/ops",
  certificate_serial: "01",
  certificate_sha256: "ab",
  certificate_not_after: "2026-01-02T00:00:00.000Z",
  remote_address: "127.0.0.1",
  count: 1,
  last_at: null,
};

describe("a spool line is an audit row", () => {
  it(
    "when it has a record id, a time, a route, a decision and a reason, the " +
      "other columns of their type or absent",
    () => {
      expect(isAuditRow(row)).toBe(true);
      const { kind: _kind, count: _count, action: _action, ...minimal } = row;
      expect(isAuditRow(minimal)).toBe(true);
    },
  );

  it.each([
    ["no record id", { record_id: undefined }],
    ["a record id that is not a UUID", { record_id: "r-1" }],
    ["a time that is not one", { at: "yesterday" }],
    ["no route", { route: undefined }],
    ["a decision other than allow or deny", { decision: "maybe" }],
    ["a kind other than decision or action", { kind: "other" }],
    ["a count below 1", { count: 0 }],
    ["a count that is not an integer", { count: "2" }],
    ["a text column that is not text", { target: 5 }],
    ["a last time that is not one", { last_at: "soon" }],
  ])("not with %s", (_name, change) => {
    expect(isAuditRow({ ...row, ...change })).toBe(false);
  });

  it.each([
    ["null", null],
    ["an array", [row]],
    ["a string", "row"],
  ])("not when it is %s", (_name, value) => {
    expect(isAuditRow(value)).toBe(false);
  });
});
