import { ScalarType, type DescField, type DescMessage } from "@bufbuild/protobuf";
import { configureTextEncoding, getTextEncoding } from "@bufbuild/protobuf/wire";
import { Code, ConnectError } from "@connectrpc/connect";
import { segmentIdError, segmentIdProblem } from "../identity/segment-id.js";
import { memberPath } from "./json/wire.js";
import { transportFacts } from "./transport-facts.js";

/**
 * Largest magnitude of a 64-bit field: every one is stored as an exact JS number (see
 * store/schema.ts).
 */
const maxInt64 = BigInt(Number.MAX_SAFE_INTEGER);
/**
 * Fields holding a runner or workspace id, wherever they are: each must be a valid SPIFFE path
 * segment when set.
 */
const idFields: ReadonlySet<string> = new Set(["runner_id", "workspace_id"]);
const unpairedSurrogate = /\p{Cs}/u;
const int64Types = new Set([
  ScalarType.INT64,
  ScalarType.UINT64,
  ScalarType.SINT64,
  ScalarType.FIXED64,
  ScalarType.SFIXED64,
]);

/**
 * The text rules every decoded request message passes, on both surfaces,
 * before anything reads it: walked by descriptor, every string (nested
 * messages, lists, map keys and values, google.protobuf.Value data) must be
 * valid Unicode without NUL (Postgres text cannot hold NUL, and what is
 * stored must be what was sent); every 64-bit integer must be within
 * ±(2^53 - 1); runnerId and workspaceId, when set, must be valid ids
 * (segment-id.ts). The error names the field by its JSON path, after
 * `where` ("line 3: ") when given, and never quotes a text value (it may be
 * a secret).
 */
export function checkRequestText(schema: DescMessage, message: object, where = ""): void {
  if (transportFacts(message).textChecked) return;
  walkMessage(schema, message as Record<string, unknown>, "", (path, problem) => {
    throw new ConnectError(`${where}field "${path}" ${problem}`, Code.InvalidArgument);
  });
}

type Refuse = (path: string, problem: string) => never;

function walkMessage(
  schema: DescMessage,
  message: Record<string, unknown>,
  parent: string,
  refuse: Refuse,
): void {
  if (isValueType(schema)) return walkValue(schema.typeName, message, parent, refuse);
  for (const field of schema.fields) {
    const value = fieldValue(field, message);
    if (value === undefined || value === null) continue;
    const path = memberPath(parent, field.jsonName);
    switch (field.fieldKind) {
      case "scalar":
        walkScalar(field.scalar, value, path, refuse);
        if (field.scalar === ScalarType.STRING && idFields.has(field.name) && value !== "")
          checkId(value as string, path);
        break;
      case "message":
        walkMessage(field.message, value as Record<string, unknown>, path, refuse);
        break;
      case "list":
        (value as unknown[]).forEach((item, i) => {
          if (field.listKind === "scalar")
            walkScalar(field.scalar, item, memberPath(path, i), refuse);
          else if (field.listKind === "message")
            walkMessage(
              field.message,
              item as Record<string, unknown>,
              memberPath(path, i),
              refuse,
            );
        });
        break;
      case "map":
        for (const [key, item] of Object.entries(value as Record<string, unknown>)) {
          const itemPath = memberPath(path, key);
          if (field.mapKey === ScalarType.STRING) walkText(key, `${path} key`, refuse);
          if (field.mapKind === "scalar") walkScalar(field.scalar, item, itemPath, refuse);
          else if (field.mapKind === "message")
            walkMessage(field.message, item as Record<string, unknown>, itemPath, refuse);
        }
        break;
      case "enum":
        break;
    }
  }
}

function fieldValue(field: DescField, message: Record<string, unknown>): unknown {
  if (!field.oneof) return message[field.localName];
  const oneof = message[field.oneof.localName] as { case?: string; value?: unknown } | undefined;
  return oneof?.case === field.localName ? oneof.value : undefined;
}

function walkScalar(type: ScalarType, value: unknown, path: string, refuse: Refuse): void {
  if (type === ScalarType.STRING) return walkText(value as string, path, refuse);
  if (int64Types.has(type)) {
    const n = BigInt(value as bigint | string | number);
    if (n > maxInt64 || n < -maxInt64)
      refuse(
        path,
        `is ${n}, past 2^53 - 1 (${maxInt64}), the largest integer this control plane stores; send a smaller value`,
      );
  }
}

function walkText(text: string, path: string, refuse: Refuse): void {
  const nul = text.indexOf("\u0000");
  if (nul !== -1)
    refuse(
      path,
      `contains NUL (U+0000) at character ${nul + 1}; text cannot hold NUL: ` +
        `remove it (send binary data base64-encoded)`,
    );
  if (unpairedSurrogate.test(text))
    refuse(
      path,
      "is not valid UTF-8 text (invalid bytes, or an unpaired surrogate escape); send text as UTF-8",
    );
}

/**
 * Whether a string field's text passes the rules (the predicate of walkText, without the error).
 */
export function textAllowed(text: string): boolean {
  return !text.includes("\u0000") && !unpairedSurrogate.test(text);
}

/**
 * Whether the value of a string field passes the id rule: only runner_id and workspace_id, when
 * set, must be ids.
 */
export function idAllowed(field: DescField, value: string): boolean {
  return value === "" || !idFields.has(field.name) || segmentIdProblem(value) === undefined;
}

/**
 * Whether plain JSON held as a google.protobuf.Value surely passes the rules
 * of walkValue: every string and key allowed text, every number finite. False
 * also when it cannot say cheaply (nested deeper than `depthLeft`, a
 * "__proto__" key, which a decoded Struct does not keep as sent): the caller
 * then decodes and walks the message by its descriptor, which decides.
 */
export function valueSurelyAllowed(json: unknown, depthLeft: number): boolean {
  switch (typeof json) {
    case "string":
      return textAllowed(json);
    case "number":
      return Number.isFinite(json);
    case "boolean":
      return true;
    case "object": {
      if (json === null) return true;
      if (depthLeft <= 0) return false;
      if (Array.isArray(json)) {
        for (const item of json) if (!valueSurelyAllowed(item, depthLeft - 1)) return false;
        return true;
      }
      const object = json as Record<string, unknown>;
      for (const key in object)
        if (
          key === "__proto__" ||
          !textAllowed(key) ||
          !valueSurelyAllowed(object[key], depthLeft - 1)
        )
          return false;
      return true;
    }
    default:
      return false;
  }
}

function checkId(value: string, path: string): void {
  const problem = segmentIdProblem(value);
  if (problem) throw segmentIdError(path, value, problem);
}

function isValueType(schema: DescMessage): boolean {
  return (
    schema.typeName === "google.protobuf.Value" ||
    schema.typeName === "google.protobuf.Struct" ||
    schema.typeName === "google.protobuf.ListValue"
  );
}

/**
 * google.protobuf.Value, Struct and ListValue, walked as the JSON they stand for (`data.text`, not
 * `data.structValue...`).
 */
function walkValue(
  typeName: string,
  message: Record<string, unknown>,
  path: string,
  refuse: Refuse,
): void {
  if (typeName === "google.protobuf.Struct") {
    for (const [key, v] of Object.entries(
      (message["fields"] ?? {}) as Record<string, Record<string, unknown>>,
    )) {
      walkText(key, `${path} key`, refuse);
      walkValue("google.protobuf.Value", v, memberPath(path, key), refuse);
    }
    return;
  }
  if (typeName === "google.protobuf.ListValue") {
    ((message["values"] ?? []) as Record<string, unknown>[]).forEach((v, i) =>
      walkValue("google.protobuf.Value", v, memberPath(path, i), refuse),
    );
    return;
  }
  const kind = message["kind"] as { case?: string; value?: unknown } | undefined;
  switch (kind?.case) {
    case "stringValue":
      return walkText(kind.value as string, path, refuse);
    case "numberValue":
      if (!Number.isFinite(kind.value))
        refuse(path, "is not a finite number; JSON has no NaN or Infinity");
      return;
    case "structValue":
      return walkValue(
        "google.protobuf.Struct",
        kind.value as Record<string, unknown>,
        path,
        refuse,
      );
    case "listValue":
      return walkValue(
        "google.protobuf.ListValue",
        kind.value as Record<string, unknown>,
        path,
        refuse,
      );
  }
}

let binaryUtf8Marked = false;

/**
 * Makes binary decoding (Connect and gRPC protobuf bodies) hand invalid UTF-8
 * in a string field to checkRequestText instead of failing the parse.
 * protobuf-es refuses it (proto3 strings are validated), but Connect reports
 * any parse failure as `internal`: a 500 for bad input, with no field named.
 * Decoded here instead with U+FFFD and an unpaired surrogate appended — which
 * valid UTF-8 can never decode to — the message reaches the text rules, which
 * refuse it as invalid_argument naming the field. Process-wide (protobuf-es
 * has one text encoding); idempotent.
 */
export function markInvalidUtf8InBinary(): void {
  if (binaryUtf8Marked) return;
  binaryUtf8Marked = true;
  const base = getTextEncoding();
  configureTextEncoding({
    encodeUtf8: (text) => base.encodeUtf8(text),
    checkUtf8: (text) => base.checkUtf8(text),
    decodeUtf8(bytes, strict) {
      if (!strict) return base.decodeUtf8(bytes);
      try {
        return base.decodeUtf8(bytes, true);
      } catch {
        return `${base.decodeUtf8(bytes)}\udfff`;
      }
    },
  });
}
