import {
  ScalarType,
  toJson,
  type DescField,
  type DescMessage,
  type JsonObject,
  type JsonValue,
  type MessageShape,
} from "@bufbuild/protobuf";
import { Edition, FeatureSet_FieldPresence } from "@bufbuild/protobuf/wkt";

/**
 * proto3 JSON of a message without protobuf-es reflection, the fast path codec.ts takes for every
 * message type it can (every REST reply, the Job of every lease and completion, request bodies).
 * Each message type gets a compiled plan once: a writer per field in field-number order, a reader
 * per JSON name. The result is the one protobuf-es gives (`toJson` with default options, `fromJson`
 * with `ignoreUnknownFields`), byte for byte: the plan takes only what it is sure of and otherwise
 * hands the whole message to protobuf-es, which then decides, and words any refusal, as before.
 * Checked against protobuf-es by test/unit/json-codec.test.ts over every message type of the API.
 *
 * Why: reflection was ~9 % of the control plane's CPU at N = 64 in the lease
 * benchmark (a snapshot decoded into a Job, the Job and Lease encoded back,
 * each request body decoded); docs/performance.md has the before and after.
 *
 * Taken: proto3 files; scalars but bytes; enums; messages; Timestamp, Value
 * and Struct fields; lists; maps with string keys. A message type with
 * anything else (bytes, other well-known types, other map keys, int64 as
 * string) is left to protobuf-es whole.
 */
export function messageToJson<T extends DescMessage>(
  schema: T,
  message: MessageShape<T>,
): JsonValue {
  const plan = planOf(schema);
  if (plan) {
    try {
      return plan.write(message as unknown as Msg);
    } catch (err) {
      if (err !== unsure) throw err;
    }
  }
  return toJson(schema, message);
}

/**
 * The message the plan reads from `json`, or undefined when protobuf-es must decide (it may
 * refuse).
 */
export function fastFromJson<T extends DescMessage>(
  schema: T,
  json: JsonValue,
): MessageShape<T> | undefined {
  const plan = planOf(schema);
  if (!plan) return undefined;
  try {
    return plan.read(json, 0) as unknown as MessageShape<T>;
  } catch (err) {
    if (err === unsure) return undefined;
    throw err;
  }
}

type Msg = Record<string, unknown>;

interface Plan {
  readonly write: (message: Msg) => JsonValue;
  readonly read: (json: JsonValue, depth: number) => Msg;
}

/** Thrown inside a plan where protobuf-es must decide; never escapes this module. */
const unsure = Symbol("unsure");
function fail(): never {
  throw unsure;
}

/** Deeper JSON than this goes to protobuf-es (its own bound is 100). */
const maxDepth = 32;
const implicit = FeatureSet_FieldPresence.IMPLICIT;
const plans = new WeakMap<DescMessage, Plan | null>();
const hasOwn = Object.prototype.hasOwnProperty;

function planOf(schema: DescMessage): Plan | undefined {
  let plan = plans.get(schema);
  if (plan === undefined) {
    if (schema.typeName.startsWith("google.protobuf.")) plan = wktPlan(schema.typeName);
    else plan = supported(schema, new Set()) ? buildPlan(schema) : null;
    plans.set(schema, plan);
  }
  return plan ?? undefined;
}

const wkt = {
  timestamp: "google.protobuf.Timestamp",
  value: "google.protobuf.Value",
  struct: "google.protobuf.Struct",
} as const;

/** Whether every field of the type (and of the types it holds) is of a kind the plan takes. */
function supported(schema: DescMessage, seen: Set<DescMessage>): boolean {
  if (seen.has(schema)) return true;
  seen.add(schema);
  if (schema.file.edition !== Edition.EDITION_PROTO3) return false;
  for (const field of schema.fields) {
    if (field.presence === FeatureSet_FieldPresence.LEGACY_REQUIRED) return false;
    if (field.fieldKind === "map" && field.mapKey !== ScalarType.STRING) return false;
    const scalar =
      field.fieldKind === "scalar" || field.fieldKind === "list" || field.fieldKind === "map"
        ? field.scalar
        : undefined;
    if (scalar === ScalarType.BYTES) return false;
    if ("longAsString" in field && field.longAsString) return false;
    const message = field.message;
    if (!message) continue;
    if (message.typeName === wkt.struct && field.fieldKind !== "message") return false;
    if (
      message.typeName.startsWith("google.protobuf.") &&
      !Object.values<string>(wkt).includes(message.typeName)
    )
      return false;
    if (!message.typeName.startsWith("google.protobuf.") && !supported(message, seen)) return false;
  }
  return true;
}

/**
 * A well-known type has a JSON form of its own: Timestamp and Value are taken, the others left to
 * protobuf-es.
 */
function wktPlan(typeName: string): Plan | null {
  if (typeName === wkt.timestamp) return { write: timestampToJson, read: timestampFromJson };
  if (typeName === wkt.value) return { write: valueToJson, read: valueFromJson };
  return null;
}

/**
 * A message type's plan as generated code: a writer and a reader that name
 * each field as a literal property (`m["workspaceId"]`), so V8 sees one
 * shape at every access; closures over a field's name made every access
 * megamorphic and the writer no faster than reflection (measured:
 * bench/micro/json-codec.ts). The values go through the codecs below.
 */
function buildPlan(schema: DescMessage): Plan {
  const fields = [...schema.fields].sort((a, b) => a.number - b.number);
  const codecs: Codec[] = [];
  const codec = (field: DescField) => codecs.push(valueCodec(field)) - 1;
  const lit = (text: string) => JSON.stringify(text);
  const prop = (name: string) => `m[${lit(name)}]`;

  const writes = fields.map((field) => {
    const i = codec(field);
    const out = `j[${lit(field.jsonName)}] = c[${i}].write(v);`;
    if (field.oneof)
      return `v = ${prop(field.oneof.localName)}; if (v.case === ${lit(field.localName)}) { v = v.value; ${out} }`;
    const load = `v = ${prop(field.localName)};`;
    if (field.presence !== implicit)
      return `${load} if (v !== undefined && hasOwn.call(m, ${lit(field.localName)})) ${out}`;
    return `${load} if (${implicitSet(field)}) ${out}`;
  });

  const zero = [`$typeName: ${lit(schema.typeName)}`];
  for (const m of schema.members) {
    if (m.kind === "oneof") zero.push(`${lit(m.localName)}: { case: undefined }`);
    else if (m.presence === implicit && m.fieldKind !== "message")
      zero.push(`${lit(m.localName)}: ${zeroText(m)}`);
  }
  const cases = fields.map((field) => {
    const i = codec(field);
    const read = `c[${i}].read(v, depth)`;
    let body: string;
    if (field.oneof)
      body =
        `if (v === null || ${prop(field.oneof.localName)}.case !== undefined) ` +
        `fail(); ${prop(field.oneof.localName)} = { case: ` +
        `${lit(field.localName)}, value: ${read} };`;
    else if (field.message?.typeName === wkt.value && field.fieldKind === "message")
      body = `${prop(field.localName)} = v === null ? nullValue() : ${read};`;
    // null leaves the field unset, as protobuf-es's clear does on a new message
    else body = `if (v !== null) ${prop(field.localName)} = ${read};`;
    const labels = [`case ${lit(field.jsonName)}: ${body} break;`];
    // Its proto name, unless the JSON has its JSON name too (set twice: protobuf-es refuses it).
    if (field.name !== field.jsonName)
      labels.push(
        `case ${lit(field.name)}: if (hasOwn.call(json, ${lit(field.jsonName)})) fail(); ${body} break;`,
      );
    return labels.join("\n");
  });

  const source = `
    const write = function (m) { const j = {}; let v;
      ${writes.join("\n")}
      return j; };
    const read = function (json, depth) {
      if (json === null || typeof json !== "object" || Array.isArray(json) || depth > maxDepth) fail();
      const m = { ${zero.join(", ")} };
      for (const key in json) { const v = json[key];
        switch (key) {
          ${cases.join("\n")}
          default: if (key.startsWith("[")) fail(); // an extension's name: protobuf-es looks it up
        }
      }
      return m; };
    return { write, read };`;
  // Generated from the descriptor alone: names and numbers, each quoted by JSON.stringify.
  const make = new Function("c", "hasOwn", "fail", "nullValue", "maxDepth", source) as (
    ...args: unknown[]
  ) => Plan;
  return make(codecs, hasOwn, fail, nullValue, maxDepth);
}

/** The JS text of a field's zero value, as protobuf-es's create() sets it for implicit presence. */
function zeroText(field: DescField): string {
  switch (field.fieldKind) {
    case "list":
      return "[]";
    case "map":
      return "{}";
    case "enum":
      return String(field.enum.values[0]!.number);
    case "scalar":
      switch (field.scalar) {
        case ScalarType.STRING:
          return '""';
        case ScalarType.BOOL:
          return "false";
        case ScalarType.INT64:
        case ScalarType.UINT64:
        case ScalarType.SINT64:
        case ScalarType.FIXED64:
        case ScalarType.SFIXED64:
          return "0n";
        default:
          return "0";
      }
    default:
      throw new Error(`${field.toString()}: no zero value`);
  }
}

/**
 * The JS test, on `v`, of protobuf-es's isSet for a field with implicit presence: not its zero
 * value.
 */
function implicitSet(field: DescField): string {
  switch (field.fieldKind) {
    case "list":
      return "v.length > 0";
    case "map":
      return "Object.keys(v).length > 0";
    case "enum":
      return `v !== ${field.enum.values[0]!.number}`;
    case "scalar":
      switch (field.scalar) {
        case ScalarType.BOOL:
          return "v !== false";
        case ScalarType.STRING:
          return 'v !== ""';
        case ScalarType.DOUBLE:
        case ScalarType.FLOAT:
          return "!Object.is(v, 0)";
        default:
          return "v != 0"; // protobuf-es's own test: 0n, 0 and "0" are zero
      }
    default:
      throw new Error(`${field.toString()}: a message field has explicit presence`);
  }
}

interface Codec {
  readonly write: (value: unknown) => JsonValue;
  readonly read: (json: JsonValue, depth: number) => unknown;
}

/** The codec of a field's value: a list's or map's whole value, or a singular one. */
function valueCodec(field: DescField): Codec {
  switch (field.fieldKind) {
    case "scalar":
      return scalarCodec(field.scalar);
    case "enum":
      return enumCodec(field.enum);
    case "message":
      return messageCodec(field.message, field.message.typeName === wkt.struct);
    case "list": {
      const item =
        field.listKind === "scalar"
          ? scalarCodec(field.scalar)
          : field.listKind === "enum"
            ? enumCodec(field.enum)
            : messageCodec(field.message, false);
      return {
        write: (v) => (v as unknown[]).map(item.write),
        read: (json, depth) => {
          if (!Array.isArray(json)) fail();
          return json.map((j) => (j === null ? fail() : item.read(j, depth + 1)));
        },
      };
    }
    case "map": {
      const item =
        field.mapKind === "scalar"
          ? scalarCodec(field.scalar)
          : field.mapKind === "enum"
            ? enumCodec(field.enum)
            : messageCodec(field.message, false);
      return {
        write: (v) => {
          const json: JsonObject = {};
          for (const key of Object.keys(v as object)) json[key] = item.write((v as Msg)[key]);
          return json;
        },
        read: (json, depth) => {
          if (json === null || typeof json !== "object" || Array.isArray(json)) fail();
          const map: Msg = {};
          for (const key in json)
            map[ownKey(key)] = json[key] === null ? fail() : item.read(json[key]!, depth + 1);
          return map;
        },
      };
    }
  }
}

/**
 * No lone surrogate: protobuf-es's UTF-8 check of a string field (Node 20's String#isWellFormed,
 * not yet in the TS lib here).
 */
const wellFormed = (text: string): boolean =>
  (text as string & { isWellFormed(): boolean }).isWellFormed();

const int32 = { min: -0x80000000, max: 0x7fffffff };
const uint32 = { min: 0, max: 0xffffffff };
const float32Max = 3.4028234663852886e38;
const int64 = { min: -(2n ** 63n), max: 2n ** 63n - 1n, text: /^-?(?:0|[1-9][0-9]{0,18})$/ };
const uint64 = { min: 0n, max: 2n ** 64n - 1n, text: /^(?:0|[1-9][0-9]{0,19})$/ };

function scalarCodec(scalar: ScalarType): Codec {
  switch (scalar) {
    case ScalarType.STRING:
      return {
        write: (v) => (typeof v === "string" ? v : fail()),
        read: (j) => (typeof j === "string" && wellFormed(j) ? j : fail()),
      };
    case ScalarType.BOOL:
      return {
        write: (v) => (typeof v === "boolean" ? v : fail()),
        read: (j) => (typeof j === "boolean" ? j : fail()),
      };
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT: {
      const max = scalar === ScalarType.FLOAT ? float32Max : Number.MAX_VALUE;
      return {
        write: (v) =>
          typeof v !== "number"
            ? fail()
            : Number.isNaN(v)
              ? "NaN"
              : v === Infinity
                ? "Infinity"
                : v === -Infinity
                  ? "-Infinity"
                  : v,
        read: (j) =>
          typeof j === "number" && Math.abs(j) <= max
            ? j
            : j === "NaN"
              ? NaN
              : j === "Infinity"
                ? Infinity
                : j === "-Infinity"
                  ? -Infinity
                  : fail(),
      };
    }
    case ScalarType.INT32:
    case ScalarType.SINT32:
    case ScalarType.SFIXED32:
    case ScalarType.UINT32:
    case ScalarType.FIXED32: {
      const range = scalar === ScalarType.UINT32 || scalar === ScalarType.FIXED32 ? uint32 : int32;
      return {
        write: (v) => (typeof v === "number" ? v : fail()),
        read: (j) =>
          typeof j === "number" &&
          Number.isInteger(j) &&
          j >= range.min &&
          j <= range.max &&
          !Object.is(j, -0)
            ? j
            : fail(),
      };
    }
    case ScalarType.BYTES:
      return { write: fail, read: fail };
    default: {
      const range = scalar === ScalarType.UINT64 || scalar === ScalarType.FIXED64 ? uint64 : int64;
      return {
        write: (v) =>
          typeof v === "bigint" ||
          typeof v === "string" ||
          (typeof v === "number" && Number.isInteger(v))
            ? v.toString()
            : fail(),
        read: (j) => {
          let n: bigint;
          if (typeof j === "number" && Number.isSafeInteger(j)) n = BigInt(j);
          else if (typeof j === "string" && range.text.test(j)) n = BigInt(j);
          else fail();
          return n >= range.min && n <= range.max ? n : fail();
        },
      };
    }
  }
}

function enumCodec(desc: NonNullable<DescField["enum"]>): Codec {
  if (desc.typeName === "google.protobuf.NullValue")
    return { write: (v) => (typeof v === "number" ? null : fail()), read: fail };
  const names = new Map(desc.values.map((v) => [v.number, v.name]));
  const numbers = new Map(desc.values.map((v) => [v.name, v.number]));
  return {
    write: (v) => (typeof v === "number" ? (names.get(v) ?? v) : fail()),
    read: (j) => (typeof j === "string" ? (numbers.get(j) ?? fail()) : fail()),
  };
}

function messageCodec(desc: DescMessage, structField: boolean): Codec {
  switch (desc.typeName) {
    case wkt.timestamp:
      return { write: (v) => timestampToJson(v as Msg), read: timestampFromJson };
    case wkt.value:
      return { write: (v) => valueToJson(v as Msg), read: valueFromJson };
    case wkt.struct:
      // A Struct field holds its JSON object (protobuf-es represents it so), except inside a Value.
      if (structField)
        return {
          write: (v) => plainJson(v as JsonValue, 0),
          read: (j, depth) =>
            j !== null && typeof j === "object" && !Array.isArray(j) ? plainJson(j, depth) : fail(),
        };
      return { write: fail, read: fail };
    default:
      return {
        write: (v) => planOf(desc)!.write(v as Msg),
        read: (j, depth) => planOf(desc)!.read(j, depth + 1),
      };
  }
}

const minSeconds = Date.parse("0001-01-01T00:00:00Z") / 1000;
const maxSeconds = Date.parse("9999-12-31T23:59:59Z") / 1000;

/** protobuf-es's Timestamp JSON: RFC 3339 in UTC, with 0, 3, 6 or 9 digits of fraction. */
function timestampToJson(ts: Msg): string {
  const { seconds, nanos } = ts as { seconds: bigint; nanos: number };
  if (typeof seconds !== "bigint" || typeof nanos !== "number") fail();
  const s = Number(seconds);
  if (
    s < minSeconds ||
    s > maxSeconds ||
    nanos < 0 ||
    nanos > 999_999_999 ||
    !Number.isInteger(nanos)
  )
    fail();
  let z = "Z";
  if (nanos > 0) {
    const digits = (nanos + 1_000_000_000).toString().substring(1);
    z = digits.endsWith("000000")
      ? `.${digits.substring(0, 3)}Z`
      : digits.endsWith("000")
        ? `.${digits.substring(0, 6)}Z`
        : `.${digits}Z`;
  }
  return dateTimeText(s) + z;
}

// The date and time of the last seconds written, by seconds modulo 64: a job's timestamps and the
// leases of one second share them, and formatting a Date was half of a Lease's encoding.
const cachedSeconds = new Float64Array(64).fill(NaN);
const cachedText: string[] = [];

/** "YYYY-MM-DDTHH:MM:SS" of whole seconds since the epoch (years 1 to 9999). */
function dateTimeText(seconds: number): string {
  const slot = seconds & 63;
  if (cachedSeconds[slot] === seconds) return cachedText[slot]!;
  const text = new Date(seconds * 1000).toISOString().slice(0, 19);
  cachedSeconds[slot] = seconds;
  cachedText[slot] = text;
  return text;
}

const rfc3339Utc = /^([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2})(?:\.([0-9]{1,9}))?Z$/;

/** A Timestamp from RFC 3339 in UTC (an offset goes to protobuf-es). */
function timestampFromJson(json: JsonValue): Msg {
  if (typeof json !== "string") fail();
  const m = rfc3339Utc.exec(json);
  if (!m) fail();
  const ms = Date.parse(`${m[1]}Z`);
  if (Number.isNaN(ms) || ms < minSeconds * 1000 || ms > maxSeconds * 1000) fail();
  const fraction = m[2];
  return {
    $typeName: wkt.timestamp,
    seconds: BigInt(ms / 1000),
    nanos: fraction ? Number(fraction.padEnd(9, "0")) : 0,
  };
}

function valueToJson(value: Msg): JsonValue {
  const kind = value.kind as { case: string | undefined; value: unknown } | undefined;
  switch (kind?.case) {
    case "nullValue":
      return null;
    case "numberValue":
      return Number.isFinite(kind.value) ? (kind.value as number) : fail();
    case "boolValue":
    case "stringValue":
      return kind.value as JsonValue;
    case "structValue": {
      const json: JsonObject = {};
      const fields = (kind.value as { fields: Record<string, Msg> }).fields;
      for (const key of Object.keys(fields)) json[key] = valueToJson(fields[key]!);
      return json;
    }
    case "listValue":
      return (kind.value as { values: Msg[] }).values.map(valueToJson);
    default:
      return fail();
  }
}

function nullValue(): Msg {
  return { $typeName: wkt.value, kind: { case: "nullValue", value: 0 } };
}

/** A google.protobuf.Value of plain JSON, as protobuf-es's valueFromJson builds it. */
function valueFromJson(json: JsonValue, depth: number): Msg {
  if (depth > maxDepth) fail();
  switch (typeof json) {
    case "number":
      return { $typeName: wkt.value, kind: { case: "numberValue", value: json } };
    case "string":
      return { $typeName: wkt.value, kind: { case: "stringValue", value: json } };
    case "boolean":
      return { $typeName: wkt.value, kind: { case: "boolValue", value: json } };
    default: {
      if (json === null) return nullValue();
      if (Array.isArray(json))
        return {
          $typeName: wkt.value,
          kind: {
            case: "listValue",
            value: {
              $typeName: "google.protobuf.ListValue",
              values: json.map((j) => valueFromJson(j, depth + 1)),
            },
          },
        };
      const fields: Record<string, Msg> = {};
      for (const key in json) fields[ownKey(key)] = valueFromJson(json[key]!, depth + 1);
      return {
        $typeName: wkt.value,
        kind: { case: "structValue", value: { $typeName: wkt.struct, fields } },
      };
    }
  }
}

/**
 * A key that is safe to assign on a plain object ("__proto__" would set its prototype): others go
 * to protobuf-es.
 */
function ownKey(key: string): string {
  return key === "__proto__" ? fail() : key;
}

/** A copy of plain JSON (what a Struct field holds), or unsure for anything else in it. */
function plainJson(json: JsonValue, depth: number): JsonValue {
  if (depth > maxDepth) fail();
  switch (typeof json) {
    case "number":
      return Number.isFinite(json) ? json : fail();
    case "string":
    case "boolean":
      return json;
    case "object": {
      if (json === null) return null;
      if (Array.isArray(json)) return json.map((j) => plainJson(j, depth + 1));
      if (Object.getPrototypeOf(json) !== Object.prototype || "$typeName" in json) fail();
      const copy: JsonObject = {};
      for (const key of Object.keys(json)) copy[ownKey(key)] = plainJson(json[key]!, depth + 1);
      return copy;
    }
    default:
      return fail();
  }
}
