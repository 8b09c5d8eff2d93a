/**
 * SPIFFE IDs, parsed to the letter of the SPIFFE-ID standard
 * (https://github.com/spiffe/spiffe/blob/main/standards/SPIFFE-ID.md):
 * `spiffe://<trust-domain>/<segment>/...`, lowercase scheme and trust domain,
 * trust domain characters [a-z0-9.-_], path segments of [A-Za-z0-9.-_] that are
 * neither empty nor "." / "..", no trailing slash, and no percent-encoding,
 * query, fragment, userinfo or port. At most 2048 bytes.
 */

/** A parsed SPIFFE ID. */
export interface SpiffeId {
  readonly trustDomain: string;
  /** Path segments, e.g. ["runners", "r1", "workspaces", "w1"]. */
  readonly segments: readonly string[];
  /** The ID as text, exactly as parsed. */
  readonly text: string;
}

/** Thrown when a text is not a valid SPIFFE ID; the message names the rule. */
export class InvalidSpiffeIdError extends Error {
  constructor(
    readonly input: string,
    reason: string,
  ) {
    super(`${JSON.stringify(truncate(input))} is not a valid SPIFFE ID: ${reason}`);
    this.name = "InvalidSpiffeIdError";
  }
}

const maxBytes = 2048;
const maxTrustDomainBytes = 255;
const scheme = "spiffe://";
const trustDomainChar = /^[a-z0-9._-]$/;
const segmentChar = /^[A-Za-z0-9._-]$/;

/** Parses `input` as a SPIFFE ID or throws InvalidSpiffeIdError. */
export function parseSpiffeId(input: string): SpiffeId {
  const fail = (reason: string): never => {
    throw new InvalidSpiffeIdError(input, reason);
  };
  if (Buffer.byteLength(input, "utf8") > maxBytes) fail(`longer than ${maxBytes} bytes`);
  if (!input.startsWith(scheme)) {
    if (input.toLowerCase().startsWith(scheme)) fail('the scheme must be lowercase "spiffe"');
    fail('the scheme must be "spiffe://"');
  }
  const rest = input.slice(scheme.length);
  const slash = rest.indexOf("/");
  const trustDomain = slash === -1 ? rest : rest.slice(0, slash);
  const path = slash === -1 ? "" : rest.slice(slash);
  if (trustDomain.length === 0) fail("the trust domain is empty");
  if (trustDomain.length > maxTrustDomainBytes)
    fail(`the trust domain is longer than ${maxTrustDomainBytes} bytes`);
  for (const c of trustDomain) {
    if (trustDomainChar.test(c)) continue;
    if (c === ":") fail("a port is not allowed in the trust domain");
    if (c === "@") fail("userinfo is not allowed in the trust domain");
    checkUriSyntax(c, fail);
    if (c >= "A" && c <= "Z") fail("the trust domain must be lowercase");
    fail(`the trust domain contains ${describe(c)}; only a-z, 0-9, '.', '-' and '_' are allowed`);
  }
  const segments: string[] = [];
  if (path.length > 0) {
    const parts = path.slice(1).split("/");
    parts.forEach((part, i) => {
      if (part.length === 0)
        fail(
          i === parts.length - 1
            ? "a trailing slash is not allowed"
            : "empty path segments are not allowed",
        );
      for (const c of part) if (!segmentChar.test(c)) checkUriSyntax(c, fail);
      const problem = segmentProblem(part);
      if (problem) fail(problem);
      segments.push(part);
    });
  }
  return { trustDomain, segments, text: input };
}

/**
 * Why `segment` cannot be one SPIFFE path segment (empty, "." or "..", or a
 * character outside A-Z a-z 0-9 . - _), or undefined when it can. Runner and
 * workspace ids are such segments (see segment-id.ts).
 */
export function segmentProblem(segment: string): string | undefined {
  if (segment.length === 0) return "empty path segments are not allowed";
  if (segment === "." || segment === "..") return "'.' and '..' path segments are not allowed";
  for (const c of segment) {
    if (!segmentChar.test(c))
      return `a path segment contains ${describe(c)}; only A-Z, a-z, 0-9, '.', '-' and '_' are allowed`;
  }
  return undefined;
}

/**
 * Names the URI rule a forbidden character would start, wherever it appears (trust domain or path).
 */
function checkUriSyntax(c: string, fail: (reason: string) => never): void {
  if (c === "%") fail("percent-encoding is not allowed");
  if (c === "?") fail("a query is not allowed");
  if (c === "#") fail("a fragment is not allowed");
}

function describe(c: string): string {
  const code = c.codePointAt(0) ?? 0;
  return code < 0x21 || code > 0x7e
    ? `the character U+${code.toString(16).toUpperCase().padStart(4, "0")}`
    : `'${c}'`;
}

function truncate(s: string): string {
  return s.length > 200 ? `${s.slice(0, 200)}…` : s;
}
