import { describe, expect, it } from "vitest";
import { toJson } from "@bufbuild/protobuf";
import {
  EventsRequestSchema,
  LogsRequestSchema,
  RegisterRequestSchema,
  type LogsRequest,
} from "../../gen/forelead/runner/v1/runner_pb.js";
import { decodeJson } from "../../src/protocol/json/codec.js";
import { flatDecoder } from "../../src/protocol/json/flat.js";
import { transportFacts } from "../../src/protocol/transport-facts.js";
import { checkRequestText } from "../../src/protocol/text-rules.js";

const base = {
  apiVersion: "v1",
  runnerId: "r1",
  jobId: "0190d3f4-0000-7000-8000-000000000000",
  leaseToken: "tok",
  sequence: 7,
};

describe("the flat decoder of stream lines", () => {
  const flat = flatDecoder(LogsRequestSchema)!;

  it("builds the message proto3 JSON would, data kept as the JSON sent", () => {
    for (const data of [
      "text\n",
      { stream: "stderr", text: "é \u{1F600}" },
      { text: "t", n: [1, 2.5, true, null, { k: "v" }] },
      undefined,
    ]) {
      const json = data === undefined ? { ...base } : { ...base, data };
      const fast = flat(json as never) as LogsRequest;
      expect(fast, JSON.stringify(json)).toBeDefined();
      const slow = decodeJson(LogsRequestSchema, json as never, { what: "line 1" });
      expect(toJson(LogsRequestSchema, fast)).toEqual(toJson(LogsRequestSchema, slow));
      expect(transportFacts(fast).plainValues).toEqual(data === undefined ? {} : { data });
      // marked: passed the text rules
      expect(() => checkRequestText(LogsRequestSchema, fast)).not.toThrow();
    }
  });

  it("leaves to proto3 JSON and the text rules every line it is not sure of", () => {
    const unsure: Record<string, unknown>[] = [
      { ...base, sequence: "7" },
      { ...base, sequence: 1.5 },
      { ...base, sequence: 2 ** 53 },
      { ...base, job_id: base.jobId },
      { ...base, extra: 1 },
      { ...base, apiVersion: null },
      { ...base, data: null },
      { ...base, jobId: 7 },
      { ...base, runnerId: "not/an id" },
      { ...base, leaseToken: "a\u0000b" },
      { ...base, data: { text: "\ud800" } },
      { ...base, data: { ["\ud800"]: "t" } },
      { ...base, data: { text: "t", n: Infinity } },
      { ...base, data: JSON.parse('{"text":"t","__proto__":{"a":1}}') as unknown },
      { ...base, data: Array.from({ length: 40 }).reduce<unknown>((inner) => [inner], "deep") },
    ];
    for (const json of unsure) expect(flat(json as never), JSON.stringify(json)).toBeUndefined();
  });

  it("serves only flat messages: strings, int64 and google.protobuf.Value", () => {
    expect(flatDecoder(EventsRequestSchema)).toBeDefined();
    expect(flatDecoder(RegisterRequestSchema)).toBeUndefined();
  });
});
