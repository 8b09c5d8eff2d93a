// parseSpiffeId against the SPIFFE-ID standard, rule by rule, and principalOf's
// reading of a parsed ID as a runner or a service.
import { describe, expect, it } from "vitest";
import { principalOf } from "../../src/identity/principal.js";
import { InvalidSpiffeIdError, parseSpiffeId } from "../../src/identity/spiffe.js";

const runnerId = "spiffe://forelead/runners/r1/workspaces/w1";
const prefix = "spiffe://forelead/";
/** A valid ID of exactly `bytes` bytes: the prefix and one long segment. */
const idOfBytes = (bytes: number) => prefix + "a".repeat(bytes - prefix.length);

describe("parseSpiffeId accepts what the standard allows", () => {
  it.each([
    { input: runnerId, trustDomain: "forelead", segments: ["runners", "r1", "workspaces", "w1"] },
    { input: "spiffe://forelead", trustDomain: "forelead", segments: [] },
    { input: "spiffe://td-1.example_org.2/x", trustDomain: "td-1.example_org.2", segments: ["x"] },
    { input: "spiffe://0123456789/x", trustDomain: "0123456789", segments: ["x"] },
    { input: "spiffe://td/a.b/..c/C-_", trustDomain: "td", segments: ["a.b", "..c", "C-_"] },
    { input: "spiffe://td/ABCxyz019", trustDomain: "td", segments: ["ABCxyz019"] },
    { input: "spiffe://td/.../.a/a.", trustDomain: "td", segments: ["...", ".a", "a."] },
  ])("$input", ({ input, trustDomain, segments }) => {
    const id = parseSpiffeId(input);
    expect(id).toEqual({ trustDomain, segments, text: input });
  });

  it("an ID of exactly 2048 bytes is accepted", () => {
    const input = idOfBytes(2048);
    expect(Buffer.byteLength(input)).toBe(2048);
    expect(parseSpiffeId(input).text).toBe(input);
  });

  it("a trust domain of exactly 255 bytes is accepted", () => {
    const td = "a".repeat(255);
    expect(parseSpiffeId(`spiffe://${td}/x`).trustDomain).toBe(td);
  });
});

describe("parseSpiffeId refuses what the standard forbids, naming the rule", () => {
  it.each([
    {
      rule: "uppercase scheme",
      input: "SPIFFE://forelead/runners/r1",
      message: 'the scheme must be lowercase "spiffe"',
    },
    {
      rule: "mixed-case scheme",
      input: "Spiffe://forelead/x",
      message: 'the scheme must be lowercase "spiffe"',
    },
    {
      rule: "another scheme",
      input: "https://forelead/runners/r1",
      message: 'the scheme must be "spiffe://"',
    },
    {
      rule: "missing //",
      input: "spiffe:forelead/runners/r1",
      message: 'the scheme must be "spiffe://"',
    },
    {
      rule: "a single slash",
      input: "spiffe:/forelead/runners/r1",
      message: 'the scheme must be "spiffe://"',
    },
    { rule: "the empty string", input: "", message: 'the scheme must be "spiffe://"' },
    {
      rule: "empty trust domain",
      input: "spiffe:///runners/r1",
      message: "the trust domain is empty",
    },
    { rule: "scheme only", input: "spiffe://", message: "the trust domain is empty" },
    {
      rule: "uppercase trust domain",
      input: "spiffe://Forelead/runners/r1",
      message: "the trust domain must be lowercase",
    },
    { rule: "port", input: "spiffe://forelead:8443/runners/r1", message: "a port is not allowed" },
    {
      rule: "empty port",
      input: "spiffe://forelead:/runners/r1",
      message: "a port is not allowed",
    },
    {
      rule: "userinfo",
      input: "spiffe://user@forelead/runners/r1",
      message: "userinfo is not allowed",
    },
    {
      rule: "other trust domain character",
      input: "spiffe://fore+lead/x",
      message: "the trust domain contains '+'",
    },
    {
      rule: "trust domain over 255 bytes",
      input: `spiffe://${"a".repeat(256)}/x`,
      message: "the trust domain is longer than 255 bytes",
    },
    {
      rule: "empty segment",
      input: "spiffe://forelead/runners//r1",
      message: "empty path segments are not allowed",
    },
    {
      rule: "empty first segment",
      input: "spiffe://forelead//runners",
      message: "empty path segments are not allowed",
    },
    {
      rule: "trailing slash",
      input: "spiffe://forelead/runners/r1/",
      message: "a trailing slash is not allowed",
    },
    {
      rule: "trailing slash after the trust domain",
      input: "spiffe://forelead/",
      message: "a trailing slash is not allowed",
    },
    {
      rule: "'.' segment",
      input: "spiffe://forelead/runners/./r1",
      message: "'.' and '..' path segments are not allowed",
    },
    {
      rule: "'..' segment",
      input: "spiffe://forelead/runners/../r1",
      message: "'.' and '..' path segments are not allowed",
    },
    {
      rule: "last segment '..'",
      input: "spiffe://forelead/runners/..",
      message: "'.' and '..' path segments are not allowed",
    },
    {
      rule: "percent-encoding",
      input: "spiffe://forelead/runners/%41",
      message: "percent-encoding is not allowed",
    },
    { rule: "query", input: "spiffe://forelead/runners/r1?x", message: "a query is not allowed" },
    {
      rule: "fragment",
      input: "spiffe://forelead/runners/r1#x",
      message: "a fragment is not allowed",
    },
    {
      rule: "query right after the trust domain",
      input: "spiffe://forelead?x",
      message: "a query is not allowed",
    },
    {
      rule: "fragment right after the trust domain",
      input: "spiffe://forelead#x",
      message: "a fragment is not allowed",
    },
    {
      rule: "percent-encoding in the trust domain",
      input: "spiffe://fore%6Cead/x",
      message: "percent-encoding is not allowed",
    },
    {
      rule: "space",
      input: "spiffe://forelead/runners/r 1",
      message: "a path segment contains the character U+0020",
    },
    {
      rule: "tab",
      input: "spiffe://forelead/runners/r\t1",
      message: "a path segment contains the character U+0009",
    },
    {
      rule: "comma (a second SAN smuggled into one URI)",
      input: `${runnerId}, URI:spiffe://forelead/runners/r2/workspaces/w1`,
      message: "a path segment contains ','",
    },
    {
      rule: "colon in a segment",
      input: "spiffe://forelead/runners/r:1",
      message: "a path segment contains ':'",
    },
    {
      rule: "non-ASCII in a segment",
      input: "spiffe://forelead/runners/r\u00e9",
      message: "a path segment contains the character U+00E9",
    },
    {
      rule: "non-ASCII in the trust domain",
      input: "spiffe://fore\u0142ead/x",
      message: "the trust domain contains the character U+0142",
    },
    {
      rule: "emoji (one code point, two UTF-16 units)",
      input: "spiffe://forelead/r\u{1F600}",
      message: "the character U+1F600",
    },
    { rule: "over 2048 bytes", input: idOfBytes(2049), message: "longer than 2048 bytes" },
    {
      rule: "over 2048 bytes counted in UTF-8, not characters",
      input: prefix + "\u00e9".repeat(1020),
      message: "longer than 2048 bytes",
    },
  ])("$rule", ({ input, message }) => {
    let thrown: unknown;
    try {
      parseSpiffeId(input);
    } catch (err) {
      thrown = err;
    }
    expect(thrown).toBeInstanceOf(InvalidSpiffeIdError);
    const err = thrown as InvalidSpiffeIdError;
    expect(err.message).toContain("is not a valid SPIFFE ID");
    expect(err.message).toContain(message);
    expect(err.input).toBe(input);
  });

  it("quotes a long input truncated to 200 characters", () => {
    const input = idOfBytes(3000);
    expect(() => parseSpiffeId(input)).toThrow(
      /^"spiffe:\/\/forelead\/a+…" is not a valid SPIFFE ID: longer than 2048 bytes$/,
    );
    expect(() => parseSpiffeId(input)).not.toThrow(input.slice(0, 201));
  });
});

describe("principalOf", () => {
  it("reads /runners/<runner-id>/workspaces/<workspace-id> as a runner", () => {
    const id = parseSpiffeId(runnerId);
    expect(principalOf(id)).toEqual({
      kind: "runner",
      spiffeId: id,
      runnerId: "r1",
      workspaceId: "w1",
    });
  });

  it("keeps the runner and workspace IDs exactly as written", () => {
    const p = principalOf(parseSpiffeId("spiffe://forelead/runners/Runner.A-1_x/workspaces/..w"));
    expect(p).toMatchObject({ kind: "runner", runnerId: "Runner.A-1_x", workspaceId: "..w" });
  });

  it.each([
    "spiffe://forelead",
    "spiffe://forelead/services/test-admin",
    "spiffe://forelead/runners/r1",
    "spiffe://forelead/runners/r1/workspaces",
    "spiffe://forelead/runners/r1/workspaces/w1/extra",
    "spiffe://forelead/runners/r1/workspace/w1",
    "spiffe://forelead/Runners/r1/workspaces/w1",
    "spiffe://forelead/workspaces/w1/runners/r1",
  ])("reads %s as a service, not a runner", (text) => {
    const id = parseSpiffeId(text);
    expect(principalOf(id)).toEqual({ kind: "service", spiffeId: id });
  });
});
