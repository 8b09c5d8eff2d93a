// A reply's REST body by the route's body mapping: response_body, the whole message, or 204.
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import {
  ClaimResponseSchema,
  ReleaseResponseSchema,
  RunnerService,
} from "../../../gen/forelead/runner/v1/runner_pb.js";
import { routeBody } from "../../../src/api/rest/reply-body.js";
import { routeOf } from "../../../src/api/routes.js";

const claim = RunnerService.method.claim;
const release = RunnerService.method.release;

describe("reply bodies", () => {
  it("are the response_body field alone when the route names one", () => {
    const reply = create(ClaimResponseSchema, { lease: { token: "t", job: { id: "j1" } } });
    expect(routeBody(routeOf(claim), claim, reply)).toEqual({ token: "t", job: { id: "j1" } });
  });

  it("are 204 (undefined) when that field is unset on a no_content_when_empty route", () => {
    expect(routeBody(routeOf(claim), claim, create(ClaimResponseSchema))).toBeUndefined();
  });

  it("are 204 when the whole message has no field set on a no_content_when_empty route", () => {
    expect(routeBody(routeOf(release), release, create(ReleaseResponseSchema))).toBeUndefined();
  });
});
