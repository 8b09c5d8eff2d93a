import { describe, expect, it } from "vitest";
import { badRequestTarget } from "../../src/server/request-target.js";

// The listener's check of a request's :path and :authority (hostile-input.test.ts sends the ones
// nghttp2 lets through to a real server; these are the rest of the rule).
describe("badRequestTarget", () => {
  it("serves a path with one leading '/' at a host[:port]", () => {
    for (const [path, authority] of [
      ["/v1/runner/leases:claim", "127.0.0.1:8443"],
      ["/forelead.runner.v1.RunnerService/Register", "[::1]:8443"],
      ["/v1/admin/jobs?workspaceId=w1&pageSize=1", "forelead.example"],
    ]) {
      expect(badRequestTarget(path, authority), `${path} at ${authority}`).toBeUndefined();
    }
  });

  it("refuses a path a URL parser reads as scheme-relative or as no path, naming it (cut at 120 characters)", () => {
    expect(badRequestTarget("//x:y", "127.0.0.1")).toMatch(
      /^the request path "\/\/x:y" is not a path starting with a single "\/"/,
    );
    expect(badRequestTarget("v1/admin/jobs", "127.0.0.1")).toMatch(
      /"v1\/admin\/jobs" is not a path/,
    );
    expect(badRequestTarget(undefined, "127.0.0.1")).toMatch(/the request path "" is not a path/);
    expect(badRequestTarget(`//${"a".repeat(500)}`, "127.0.0.1")).toContain(
      `"//${"a".repeat(118)}…"`,
    );
  });

  it("refuses a missing or empty :authority, and one that is not a host[:port]", () => {
    expect(badRequestTarget("/v1/x", undefined)).toMatch(/has no :authority \(nor Host\) header/);
    expect(badRequestTarget("/v1/x", "")).toMatch(/has no :authority/);
    expect(badRequestTarget("/v1/x", "x:y")).toMatch(/:authority "x:y" is not a host\[:port\]/);
    expect(badRequestTarget("/v1/x", "[::1")).toMatch(/is not a host\[:port\]/);
  });
});
