import { ScalarType, type DescMessage, type JsonValue } from "@bufbuild/protobuf";

/**
 * The query parameters of a GET as proto3 JSON, by the fields' JSON names:
 * a repeated field collects every value, another field takes the last one;
 * a bool is true for "true" or "1" and false for anything else. Parameters
 * that name no field are ignored, like unknown JSON fields.
 */
export function queryJson(params: URLSearchParams, schema: DescMessage): Record<string, JsonValue> {
  const out: Record<string, JsonValue> = {};
  for (const field of schema.fields) {
    const values = params.getAll(field.jsonName);
    if (values.length === 0) continue;
    const isBool = field.fieldKind === "scalar" && field.scalar === ScalarType.BOOL;
    const convert = (v: string): JsonValue => (isBool ? v === "true" || v === "1" : v);
    out[field.jsonName] = field.fieldKind === "list" ? values.map(convert) : convert(values[values.length - 1]!);
  }
  return out;
}
