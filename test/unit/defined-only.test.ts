import { describe, expect, it } from "vitest";
import { fromJson, type JsonValue } from "@bufbuild/protobuf";
import { JobSchema } from "../../gen/forelead/runner/v1/job_pb.js";
import { definedOnly } from "../../src/protocol/defined-only.js";

describe("definedOnly", () => {
  it("leaves out only the undefined fields: null, 0, false and empty values stay", () => {
    const fields = definedOnly({ a: undefined, b: null, c: 0, d: false, e: "", f: [] });
    expect(Object.keys(fields)).toEqual(["b", "c", "d", "e", "f"]);
  });

  it("makes an object with an unset field readable as proto3 JSON, which refuses undefined", () => {
    // Typed as the broker types a snapshot.
    const job: Record<string, unknown> = { id: "j1", state: undefined };
    expect(() => fromJson(JobSchema, job as JsonValue)).toThrow(/got undefined/);
    expect(fromJson(JobSchema, definedOnly(job) as JsonValue).id).toBe("j1");
  });
});
