import { isUtf8 } from "node:buffer";
import { Code, ConnectError } from "@connectrpc/connect";

/**
 * The text of a JSON request (a body, an NDJSON line, a Connect JSON
 * message), checked on its bytes before JSON.parse can change what was sent:
 *
 * - invalid UTF-8 is refused, naming the field it is in (decoding would
 *   silently put U+FFFD in its place, and the job would run with other text);
 * - an integer literal past 2^53 - 1 is refused quoting it as sent (JSON.parse
 *   would round it, and every later message would quote another number):
 *   64-bit integers are sent as strings, which are read exactly.
 *
 * `what` names the text in errors ("the request body", "line 3").
 */
export function jsonText(bytes: Uint8Array, what: string): string {
  const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (!isUtf8(buf)) {
    const at = firstInvalidUtf8(buf);
    const path = jsonPathAtEnd(buf.subarray(0, at).toString("utf8"));
    throw new ConnectError(
      `${what}: ${path ? `field "${path}"` : "the text"} is not valid UTF-8 (byte ${at}); send text as UTF-8`,
      Code.InvalidArgument,
    );
  }
  const text = buf.toString("utf8");
  if (mayHoldUnsafeInteger(text)) {
    scanJson(text, (path, literal) => {
      const value = BigInt(literal);
      if (value <= BigInt(Number.MAX_SAFE_INTEGER) && value >= -BigInt(Number.MAX_SAFE_INTEGER))
        return;
      throw new ConnectError(
        `${what}: field "${path}": the number ${literal} is past 2^53 - 1 and ` +
          `cannot be read exactly as a JSON number; send 64-bit integers as ` +
          `strings ("${literal}")`,
        Code.InvalidArgument,
      );
    });
  }
  return text;
}

/**
 * Whether `text` can hold an integer literal past 2^53 - 1: 2^53 has 16
 * digits, so only a text with a run of 16 digits can. Any such run covers
 * one of every 16th character, so only those are looked at, and the run
 * around a digit found there is measured: ~7× faster than `/\d{16}/` on
 * body chunks of the stream writer's lines (270 → 40 ns a line; it runs on
 * every NDJSON body chunk, docs/performance.md section 3).
 */
export function mayHoldUnsafeInteger(text: string): boolean {
  for (let i = 15; i < text.length; i += 16) {
    if (!isDigit(text.charCodeAt(i))) continue;
    let from = i;
    let to = i;
    while (from > 0 && isDigit(text.charCodeAt(from - 1))) from--;
    while (to + 1 < text.length && isDigit(text.charCodeAt(to + 1))) to++;
    if (to - from + 1 >= 16) return true;
    i = to; // a run past this one covers one of to + 16, to + 32, ...
  }
  return false;
}

function isDigit(c: number): boolean {
  return c >= 0x30 && c <= 0x39;
}

/** A field path as errors name it: `spec.env.FOO`, `argv[2]`, `labels["a b"]`. */
export function memberPath(parent: string, key: string | number): string {
  if (typeof key === "number") return `${parent}[${key}]`;
  if (/^[A-Za-z_][A-Za-z0-9_]*$/.test(key)) return parent ? `${parent}.${key}` : key;
  return `${parent}[${JSON.stringify(key)}]`;
}

/** Byte offset of the first byte that is not part of a well-formed UTF-8 sequence (RFC 3629). */
function firstInvalidUtf8(b: Buffer): number {
  for (let i = 0; i < b.length;) {
    const c = b[i]!;
    if (c < 0x80) {
      i++;
      continue;
    }
    const len =
      c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    if (len === 0 || i + len > b.length) return i;
    const second = b[i + 1]!;
    const lo = c === 0xe0 ? 0xa0 : c === 0xf0 ? 0x90 : 0x80; // no overlong forms
    const hi = c === 0xed ? 0x9f : c === 0xf4 ? 0x8f : 0xbf; // no surrogates, nothing past U+10FFFF
    if (second < lo || second > hi) return i;
    for (let k = 2; k < len; k++) if ((b[i + k]! & 0xc0) !== 0x80) return i;
    i += len;
  }
  return b.length;
}

interface Frame {
  readonly kind: "object" | "array";
  key: string | undefined;
  index: number;
  expectKey: boolean;
}

/** The field path the end of `prefix` (a JSON text cut short) is in. */
function jsonPathAtEnd(prefix: string): string {
  return scanJson(prefix, () => {});
}

/**
 * Walks JSON text token by token, calling `onInteger` with the path and the
 * literal of every integer number (no fraction, no exponent); returns the
 * path where the text ends. Tolerant: a text cut short or malformed is walked
 * as far as it goes (JSON.parse decides its validity afterwards).
 */
function scanJson(text: string, onInteger: (path: string, literal: string) => void): string {
  const stack: Frame[] = [];
  const path = () =>
    stack.reduce<string>(
      (p, f) =>
        f.kind === "array"
          ? memberPath(p, f.index)
          : f.key === undefined
            ? p
            : memberPath(p, f.key),
      "",
    );
  const top = () => stack[stack.length - 1];
  let i = 0;
  while (i < text.length) {
    const c = text[i]!;
    if (c === "{" || c === "[") {
      stack.push({
        kind: c === "{" ? "object" : "array",
        key: undefined,
        index: 0,
        expectKey: c === "{",
      });
      i++;
    } else if (c === "}" || c === "]") {
      stack.pop();
      i++;
    } else if (c === ",") {
      const f = top();
      if (f?.kind === "array") f.index++;
      else if (f) f.expectKey = true;
      i++;
    } else if (c === ":") {
      const f = top();
      if (f) f.expectKey = false;
      i++;
    } else if (c === '"') {
      let j = i + 1;
      while (j < text.length && text[j] !== '"') j += text[j] === "\\" ? 2 : 1;
      const f = top();
      if (f?.kind === "object" && f.expectKey) f.key = keyOf(text.slice(i, j + 1));
      i = j + 1;
    } else if (c === "-" || (c >= "0" && c <= "9")) {
      const m = /^-?\d+(\.\d+)?([eE][+-]?\d+)?/.exec(text.slice(i, i + 400));
      const literal = m?.[0] ?? c;
      if (m && m[1] === undefined && m[2] === undefined) onInteger(path(), literal);
      i += literal.length;
    } else {
      i++;
    }
  }
  return path();
}

function keyOf(literal: string): string {
  try {
    return JSON.parse(
      literal.endsWith('"') && literal.length > 1 ? literal : `${literal}"`,
    ) as string;
  } catch {
    return literal.slice(1, -1);
  }
}
