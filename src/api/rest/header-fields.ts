import type { IncomingHttpHeaders } from "node:http2";
import {
  create,
  toJson,
  type DescMessage,
  type JsonValue,
  type MessageInitShape,
} from "@bufbuild/protobuf";
import type { RouteEntry } from "../routes.js";
import { decodeJson } from "../../protocol/json/codec.js";

/**
 * The request fields a route reads from headers (`header_fields`), as JSON.
 * A repeated header is joined with ", "; a value the field cannot hold is
 * invalid_argument naming the header.
 */
export function requestHeaderFields(
  headers: IncomingHttpHeaders,
  entry: RouteEntry,
): Record<string, JsonValue> {
  const out: Record<string, JsonValue> = {};
  for (const { header, field } of entry.option.headerFields) {
    const value = headers[header];
    if (value === undefined) continue;
    const json = Array.isArray(value) ? value.join(", ") : value;
    decodeJson(entry.method.input, { [field]: json }, { what: `header ${header}` });
    out[field] = json;
  }
  return out;
}

/**
 * The reply headers a raw response takes from its first message
 * (`response_header_fields`); an unset field or an empty string sets none.
 */
export function responseHeaderFields(
  entry: RouteEntry,
  first: MessageInitShape<DescMessage> | undefined,
): Record<string, string> {
  if (!first || entry.option.responseHeaderFields.length === 0) return {};
  const json = toJson(entry.method.output, create(entry.method.output, first), {
    alwaysEmitImplicit: true,
  });
  const out: Record<string, string> = {};
  if (json === null || typeof json !== "object" || Array.isArray(json)) return out;
  for (const { header, field } of entry.option.responseHeaderFields) {
    const value = json[field];
    if (value !== undefined && value !== null && value !== "") out[header] = String(value);
  }
  return out;
}
