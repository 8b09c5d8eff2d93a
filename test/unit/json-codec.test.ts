import { describe, expect, it } from "vitest";
import {
  fromJson,
  ScalarType,
  toBinary,
  toJson,
  type DescField,
  type DescFile,
  type DescMessage,
  type JsonObject,
  type JsonValue,
} from "@bufbuild/protobuf";
import * as adminAdmin from "../../gen/forelead/admin/v1/admin_pb.js";
import * as adminBatch from "../../gen/forelead/admin/v1/batch_pb.js";
import * as adminFleet from "../../gen/forelead/admin/v1/fleet_pb.js";
import * as adminInput from "../../gen/forelead/admin/v1/input_pb.js";
import * as adminPipelines from "../../gen/forelead/admin/v1/pipelines_pb.js";
import * as adminSamples from "../../gen/forelead/admin/v1/samples_pb.js";
import * as adminStats from "../../gen/forelead/admin/v1/stats_pb.js";
import * as adminStatus from "../../gen/forelead/admin/v1/status_pb.js";
import * as apiRoute from "../../gen/forelead/api/v1/route_pb.js";
import * as enroll from "../../gen/forelead/enroll/v1/enroll_pb.js";
import * as runnerInput from "../../gen/forelead/runner/v1/input_pb.js";
import * as runnerInputs from "../../gen/forelead/runner/v1/inputs_pb.js";
import * as runnerJob from "../../gen/forelead/runner/v1/job_pb.js";
import * as runnerRunner from "../../gen/forelead/runner/v1/runner_pb.js";
import * as runnerScheduling from "../../gen/forelead/runner/v1/scheduling_pb.js";
import * as runnerSuspend from "../../gen/forelead/runner/v1/suspend_pb.js";
import { decodeJson } from "../../src/protocol/json/codec.js";
import { fastFromJson, messageToJson } from "../../src/protocol/json/compiled.js";

const modules = [
  adminAdmin,
  adminBatch,
  adminFleet,
  adminInput,
  adminPipelines,
  adminSamples,
  adminStats,
  adminStatus,
  apiRoute,
  enroll,
  runnerInput,
  runnerInputs,
  runnerJob,
  runnerRunner,
  runnerScheduling,
  runnerSuspend,
];

/** Every message type of the API's proto files, nested ones included. */
function allMessages(): DescMessage[] {
  const out: DescMessage[] = [];
  const walk = (m: DescMessage) => {
    out.push(m);
    m.nestedMessages.forEach(walk);
  };
  for (const mod of modules)
    for (const value of Object.values(mod))
      if ((value as DescFile).kind === "file") (value as DescFile).messages.forEach(walk);
  return out;
}

/** A small seeded generator, so a failure names a case that can be run again. */
function random(seed: number) {
  let s = seed >>> 0;
  const next = () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (n: number) => Math.floor(next() * n);
  const pick = <T>(xs: readonly T[]): T => xs[int(xs.length)]!;
  return { next, int, pick, chance: (p: number) => next() < p };
}
type Random = ReturnType<typeof random>;

const strings = [
  "",
  "a",
  "job-1",
  "é \u{1F600}",
  "line\nbreak",
  "\u2028",
  "0",
  "null",
  "x".repeat(40),
];
const timestamps = [
  "2026-12-04T17:52:10Z",
  "2026-12-04T17:52:10.123Z",
  "2026-12-04T17:52:10.123456Z",
  "2026-12-04T17:52:10.123456789Z",
  "1970-01-01T00:00:00Z",
  "0001-01-01T00:00:00Z",
  "9999-12-31T23:59:59.999999999Z",
  "2026-12-04T17:52:10.5Z",
  "1969-12-31T23:59:59.999Z",
];

function randomJsonValue(r: Random, depth: number): JsonValue {
  switch (r.int(depth > 2 ? 4 : 6)) {
    case 0:
      return null;
    case 1:
      return r.pick([0, -1, 1.5, 1e300, 42]);
    case 2:
      return r.pick(strings);
    case 3:
      return r.chance(0.5);
    case 4:
      return Array.from({ length: r.int(3) }, () => randomJsonValue(r, depth + 1));
    default:
      return Object.fromEntries(
        Array.from({ length: r.int(3) }, (_, i) => [
          r.pick(["k", "text", "n", ""]) + i,
          randomJsonValue(r, depth + 1),
        ]),
      );
  }
}

function randomScalar(r: Random, scalar: ScalarType): JsonValue {
  switch (scalar) {
    case ScalarType.STRING:
      return r.pick(strings);
    case ScalarType.BOOL:
      return r.chance(0.5);
    case ScalarType.DOUBLE:
      return r.pick([0, -0, 1.5, -2.25, 1e300, 123456789, "NaN", "Infinity", "-Infinity"]);
    case ScalarType.FLOAT:
      return r.pick([0, 1.5, -2.25, 3e38, "NaN"]);
    case ScalarType.BYTES:
      return r.pick(["", "AAEC", "aGVsbG8="]);
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return r.pick([0, 1, 4294967295]);
    case ScalarType.INT64:
    case ScalarType.SINT64:
    case ScalarType.SFIXED64:
      return r.pick([0, 7, -7, "9223372036854775807", "-9223372036854775808", "123"]);
    case ScalarType.UINT64:
    case ScalarType.FIXED64:
      return r.pick([0, 7, "18446744073709551615"]);
    default:
      return r.pick([0, 1, -1, 2147483647, -2147483648]);
  }
}

function randomMessageJson(r: Random, schema: DescMessage, depth: number): JsonValue {
  switch (schema.typeName) {
    case "google.protobuf.Timestamp":
      return r.pick(timestamps);
    case "google.protobuf.Duration":
      return r.pick(["0s", "1.5s", "-3s"]);
    case "google.protobuf.Value":
      return randomJsonValue(r, depth);
    case "google.protobuf.Struct":
      return Object.fromEntries(
        Array.from({ length: r.int(3) }, (_, i) => [`k${i}`, randomJsonValue(r, depth + 1)]),
      );
    case "google.protobuf.ListValue":
      return Array.from({ length: r.int(3) }, () => randomJsonValue(r, depth + 1));
  }
  if (schema.typeName.startsWith("google.protobuf.")) return {};
  const json: JsonObject = {};
  const oneofsTaken = new Set<string>();
  for (const field of schema.fields) {
    if (depth > 3 && (field.fieldKind === "message" || field.message)) continue;
    if (!r.chance(0.6)) continue;
    if (field.oneof) {
      if (oneofsTaken.has(field.oneof.name)) continue;
      oneofsTaken.add(field.oneof.name);
    }
    json[field.jsonName] = randomFieldJson(r, field, depth);
  }
  return json;
}

function randomFieldJson(r: Random, field: DescField, depth: number): JsonValue {
  const one = (): JsonValue => {
    if (field.enum) return r.pick(field.enum.values).name;
    if (field.message) return randomMessageJson(r, field.message, depth + 1);
    return randomScalar(r, field.scalar!);
  };
  if (field.fieldKind === "list") return Array.from({ length: r.int(3) }, one);
  if (field.fieldKind === "map")
    return Object.fromEntries(
      Array.from({ length: r.int(3) }, (_, i) => [
        field.mapKey === ScalarType.STRING ? r.pick(["a", "HOME", "é", ""]) + i : String(i),
        one(),
      ]),
    );
  return one();
}

const decodeOptions = { ignoreUnknownFields: true } as const;
// Messages are compared by their binary and JSON encodings: protobuf-es's equals() calls NaN
// unequal to itself.

describe("proto3 JSON without reflection (protocol/json/compiled.ts)", () => {
  const schemas = allMessages();

  it("encodes every message of every API type as protobuf-es's toJson does", () => {
    let checked = 0;
    for (const schema of schemas) {
      for (let seed = 1; seed <= 40; seed++) {
        const r = random(seed * 7919 + schema.typeName.length);
        let message;
        try {
          message = fromJson(schema, randomMessageJson(r, schema, 0), decodeOptions);
        } catch {
          continue; // a random body protobuf-es refuses (a NaN float where a Value is wanted, say)
        }
        const expected = toJson(schema, message);
        expect(messageToJson(schema, message), `${schema.typeName} seed ${seed}`).toStrictEqual(
          expected,
        );
        checked++;
      }
    }
    expect(checked).toBeGreaterThan(schemas.length * 20);
  });

  it("decodes protobuf-es's JSON of every message to an equal message, through the plan for the hot types", () => {
    const hot = new Set([
      "forelead.runner.v1.Job",
      "forelead.runner.v1.Lease",
      "forelead.runner.v1.CompleteRequest",
      "forelead.runner.v1.CompleteResponse",
      "forelead.runner.v1.CompleteNext",
      "forelead.runner.v1.ClaimResponse",
      "forelead.runner.v1.ClaimRequest",
      "forelead.runner.v1.RenewRequest",
      "forelead.runner.v1.RenewResponse",
    ]);
    const hotSeen = new Set<string>();
    for (const schema of schemas) {
      for (let seed = 1; seed <= 40; seed++) {
        const r = random(seed * 104729 + schema.typeName.length);
        let json: JsonValue;
        let message;
        try {
          message = fromJson(schema, randomMessageJson(r, schema, 0), decodeOptions);
          json = toJson(schema, message);
        } catch {
          continue;
        }
        const fast = fastFromJson(schema, json);
        if (hot.has(schema.typeName)) {
          expect(fast, `${schema.typeName} seed ${seed}: ${JSON.stringify(json)}`).toBeDefined();
          hotSeen.add(schema.typeName);
        }
        if (fast === undefined) continue;
        const what = `${schema.typeName} seed ${seed}: ${JSON.stringify(json)}`;
        expect(toBinary(schema, fast), what).toStrictEqual(toBinary(schema, message));
        expect(toJson(schema, fast), what).toStrictEqual(json);
        expect(messageToJson(schema, fast), what).toStrictEqual(json);
      }
    }
    expect([...hotSeen].sort()).toEqual([...hot].sort());
  });

  it("decodes JSON in forms protobuf-es reads or refuses the same, or leaves it to protobuf-es", () => {
    const variants = (json: JsonObject, schema: DescMessage, r: Random): JsonObject[] => {
      const out: JsonObject[] = [];
      for (const field of schema.fields) {
        const value = json[field.jsonName];
        out.push({ ...json, [field.jsonName]: null });
        out.push({ ...json, unknownKey: 1 });
        if (value === undefined) continue;
        if (field.name !== field.jsonName)
          out.push(
            {
              ...Object.fromEntries(Object.entries(json).filter(([k]) => k !== field.jsonName)),
              [field.name]: value,
            },
            { ...json, [field.name]: value },
          );
        if (typeof value === "number")
          out.push(
            { ...json, [field.jsonName]: String(value) },
            { ...json, [field.jsonName]: value + 0.5 },
          );
        if (typeof value === "string")
          out.push({
            ...json,
            [field.jsonName]: r.pick([
              7,
              true,
              "\ud800",
              value.replace("Z", "+01:00"),
              `${value} `,
            ]),
          });
        if (field.enum)
          out.push(
            { ...json, [field.jsonName]: field.enum.values[0]!.number },
            { ...json, [field.jsonName]: "NOT_A_NAME" },
          );
        if (Array.isArray(value))
          out.push({ ...json, [field.jsonName]: [null] }, { ...json, [field.jsonName]: {} });
        if (value && typeof value === "object" && !Array.isArray(value))
          out.push(
            { ...json, [field.jsonName]: [] },
            { ...json, [field.jsonName]: JSON.parse('{"__proto__":{"a":1}}') as JsonValue },
          );
      }
      return out;
    };
    let agreed = 0;
    for (const schema of schemas) {
      for (let seed = 1; seed <= 6; seed++) {
        const r = random(seed * 31 + schema.typeName.length);
        const base = randomMessageJson(r, schema, 0);
        if (base === null || typeof base !== "object" || Array.isArray(base)) continue;
        for (const json of variants(base, schema, r)) {
          const what = `${schema.typeName}: ${JSON.stringify(json)}`;
          let expected;
          try {
            expected = fromJson(schema, json, decodeOptions);
          } catch {
            expect(fastFromJson(schema, json), what).toBeUndefined();
            expect(() => decodeJson(schema, json), what).toThrow();
            continue;
          }
          const fast = fastFromJson(schema, json);
          if (fast !== undefined) {
            expect(toBinary(schema, fast), what).toStrictEqual(toBinary(schema, expected));
            expect(toJson(schema, fast), what).toStrictEqual(toJson(schema, expected));
            agreed++;
          }
        }
      }
    }
    expect(agreed).toBeGreaterThan(100);
  });
});
