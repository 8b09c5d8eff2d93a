// Route matching: a path served with another method is 405 with Allow, an unknown path 404.
import { describe, expect, it } from "vitest";
import { createRouteMatcher, pathParams } from "../../../src/api/rest/route-match.js";

const bindings = [
  { name: "get", entry: { httpMethod: "GET", path: "/v1/admin/jobs/{jobId}" } },
  { name: "cancel", entry: { httpMethod: "POST", path: "/v1/admin/jobs/{jobId}/cancel" } },
  { name: "put", entry: { httpMethod: "PUT", path: "/v1/runner/uploads/{uploadId}" } },
  { name: "list", entry: { httpMethod: "GET", path: "/v1/runner/uploads/{uploadId}" } },
  { name: "dotted", entry: { httpMethod: "GET", path: "/v1/a.b" } },
];
const match = createRouteMatcher(bindings);

describe("route matching", () => {
  it("selects the route of the method and binds path segments, percent-decoded", () => {
    const found = match("GET", "/v1/admin/jobs/j%201");
    expect(found.kind).toBe("route");
    if (found.kind !== "route") return;
    expect(found.route.binding.name).toBe("get");
    expect(pathParams(found.route, "/v1/admin/jobs/j%201")).toEqual({ jobId: "j 1" });
  });

  it(
    "refuses a path served only with other methods with 405, an Allow of " +
      "those methods, and a message naming them",
    () => {
      expect(match("DELETE", "/v1/runner/uploads/u1")).toEqual({
        kind: "refused",
        status: 405,
        allow: "PUT, GET",
        body: {
          code: "unimplemented",
          message: "DELETE /v1/runner/uploads/u1 is not served; use PUT, GET",
        },
      });
    },
  );

  it("refuses a path no route serves with 404 pointing at docs/routes.md", () => {
    expect(match("GET", "/v1/admin/jobs/j1/nothing")).toEqual({
      kind: "refused",
      status: 404,
      body: {
        code: "not_found",
        message: "no route GET /v1/admin/jobs/j1/nothing; docs/routes.md lists the routes",
      },
    });
  });

  it("matches a path segment whole: a parameter takes no slash, and literal characters are literal", () => {
    expect(match("GET", "/v1/admin/jobs/a/b").kind).toBe("refused");
    expect(match("GET", "/v1/aXb").kind).toBe("refused");
    expect(match("GET", "/v1/a.b").kind).toBe("route");
  });

  it(
    "refuses a malformed escape as invalid_argument naming the field, only " +
      "when the fields are read (after authorization)",
    () => {
      const found = match("GET", "/v1/admin/jobs/%E0%A4%A");
      expect(found.kind).toBe("route");
      if (found.kind === "route")
        expect(() => pathParams(found.route, "/v1/admin/jobs/%E0%A4%A")).toThrow(
          /path parameter jobId is not valid percent-encoded UTF-8/,
        );
    },
  );
});
