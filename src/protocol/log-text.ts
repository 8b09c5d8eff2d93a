import type { JsonValue } from "@bufbuild/protobuf";

/**
 * A job log entry's `data` as the text a person reads, one line ending in a
 * newline: a text chunk as sent, {"stream", "text"} as its text, anything
 * else as JSON. The REST text/plain form of GET /v1/admin/jobs/{jobId}/logs
 * and `forelead jobs logs` both print this.
 */
export function logEntryText(value: JsonValue | undefined): string {
  if (typeof value === "string") return value;
  if (
    value &&
    typeof value === "object" &&
    !Array.isArray(value) &&
    typeof value["text"] === "string"
  ) {
    const text = value["text"];
    return text.endsWith("\n") ? text : `${text}\n`;
  }
  return `${JSON.stringify(value ?? null)}\n`;
}
