import { ScalarType, type DescMessage, type JsonValue } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";

/**
 * The query parameters of a GET (`search`, as in a URL: "?a=1&b=2") as
 * proto3 JSON, by the fields' JSON names: a repeated field collects every
 * value, another field takes the last one; a bool is true for "true" or "1"
 * and false for anything else. Parameters that name no field are ignored,
 * like unknown JSON fields. A name or value whose percent-encoding is not
 * UTF-8 is invalid_argument (URLSearchParams would put U+FFFD in its place).
 */
export function queryJson(search: string, schema: DescMessage): Record<string, JsonValue> {
  const params = new Map<string, string[]>();
  for (const pair of search.replace(/^\?/, "").split("&")) {
    if (pair === "") continue;
    const eq = pair.indexOf("=");
    const name = decodeQueryComponent(eq === -1 ? pair : pair.slice(0, eq), undefined);
    const value = decodeQueryComponent(eq === -1 ? "" : pair.slice(eq + 1), name);
    params.set(name, [...(params.get(name) ?? []), value]);
  }
  const out: Record<string, JsonValue> = {};
  for (const field of schema.fields) {
    const values = params.get(field.jsonName) ?? [];
    if (values.length === 0) continue;
    const isBool = field.fieldKind === "scalar" && field.scalar === ScalarType.BOOL;
    const convert = (v: string): JsonValue => (isBool ? v === "true" || v === "1" : v);
    out[field.jsonName] =
      field.fieldKind === "list" ? values.map(convert) : convert(values[values.length - 1]!);
  }
  return out;
}

function decodeQueryComponent(raw: string, name: string | undefined): string {
  try {
    return decodeURIComponent(raw.replace(/\+/g, " "));
  } catch {
    const what =
      name === undefined
        ? `a query parameter name (${JSON.stringify(raw.slice(0, 40))})`
        : `query parameter ${JSON.stringify(name)}`;
    throw new ConnectError(
      `${what} is not valid percent-encoded UTF-8; percent-encode the UTF-8 bytes of the text`,
      Code.InvalidArgument,
    );
  }
}
