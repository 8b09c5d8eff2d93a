import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { AdminService } from "../../gen/forelead/admin/v1/admin_pb.js";
import { RouteSchema } from "../../gen/forelead/api/v1/route_pb.js";
import { RunnerService } from "../../gen/forelead/runner/v1/runner_pb.js";
import { checkedRole, routeTable } from "../../src/api/routes.js";
import { createRoleTable, describeGrant, parseRoleGrant } from "../../src/identity/roles.js";

const ci = "spiffe://forelead/services/ci";

describe("--grant values", () => {
  it("parse admin, read (global or with its workspaces) and enqueue with its workspaces", () => {
    expect(parseRoleGrant(`${ci}=admin`)).toEqual({ spiffeId: ci, role: "admin" });
    expect(parseRoleGrant(`${ci}=read`)).toEqual({ spiffeId: ci, role: "read" });
    expect(parseRoleGrant(`${ci}=read:w1, w2`)).toEqual({
      spiffeId: ci,
      role: "read",
      workspaces: ["w1", "w2"],
    });
    expect(describeGrant(parseRoleGrant(`${ci}=read:w1,w2`))).toBe("read:w1,w2");
    expect(describeGrant(parseRoleGrant(`${ci}=read`))).toBe("read");
    expect(parseRoleGrant(`${ci}=enqueue:w1,w2`)).toEqual({
      spiffeId: ci,
      role: "enqueue",
      workspaces: ["w1", "w2"],
    });
    expect(describeGrant(parseRoleGrant(`${ci}=enqueue:w1,w2`))).toBe("enqueue:w1,w2");
  });

  it("refuse what an operator could mistype, saying how to write it", () => {
    expect(() => parseRoleGrant(ci)).toThrow('has no "="; use --grant SPIFFE_ID=admin');
    expect(() => parseRoleGrant(`${ci}=enqueue`)).toThrow(
      `enqueue needs its workspaces, e.g. ${ci}=enqueue:w1,w2`,
    );
    expect(() => parseRoleGrant(`${ci}=enqueue:`)).toThrow(
      'workspace "" is not a valid id (empty path segments are not allowed)',
    );
    expect(() => parseRoleGrant(`${ci}=enqueue:w1,w/2`)).toThrow(
      'workspace "w/2" is not a valid id (a path segment contains',
    );
    expect(() => parseRoleGrant(`${ci}=read:`)).toThrow(
      'workspace "" is not a valid id (empty path segments are not allowed)',
    );
    expect(() => parseRoleGrant(`${ci}=read:w1,,w2`)).toThrow('workspace "" is not a valid id');
    expect(() => parseRoleGrant(`${ci}=reader`)).toThrow(
      'unknown role "reader"; use --grant SPIFFE_ID=admin, --grant SPIFFE_ID=read[:WORKSPACE[,WORKSPACE...]]',
    );
    expect(() => parseRoleGrant(`${ci}=write`)).toThrow('unknown role "write"');
    expect(() => parseRoleGrant("spiffe://Forelead/services/ci=read")).toThrow(
      "not a valid SPIFFE ID",
    );
    expect(() => parseRoleGrant("spiffe://other/services/ci=read", "forelead")).toThrow(
      'is not in the trust domain "forelead"',
    );
    expect(() => parseRoleGrant("spiffe://forelead/runners/r1/workspaces/w1=read")).toThrow(
      "is a runner identity",
    );
  });

  it("merge every grant of one identity, --admin included", () => {
    const table = createRoleTable(
      [
        parseRoleGrant(`${ci}=enqueue:w1`),
        parseRoleGrant(`${ci}=enqueue:w2`),
        parseRoleGrant(`${ci}=read`),
      ],
      ["spiffe://forelead/services/ops"],
    );
    expect(table.of(ci)).toEqual({
      admin: false,
      read: true,
      readWorkspaces: new Set(),
      enqueue: new Set(["w1", "w2"]),
      delegate: false,
    });
    expect(table.of("spiffe://forelead/services/ops")).toEqual({
      admin: true,
      read: false,
      readWorkspaces: new Set(),
      enqueue: new Set(),
      delegate: false,
    });
    expect(table.of("spiffe://forelead/services/nobody")).toBeUndefined();
  });

  it("read:w1 and read:w2 add up to those workspaces and never to the global read role", () => {
    const table = createRoleTable([
      parseRoleGrant(`${ci}=read:w1`),
      parseRoleGrant(`${ci}=read:w2,w1`),
      parseRoleGrant(`${ci}=enqueue:w3`),
    ]);
    expect(table.of(ci)).toEqual({
      admin: false,
      read: false,
      readWorkspaces: new Set(["w1", "w2"]),
      enqueue: new Set(["w3"]),
      delegate: false,
    });
    expect(
      createRoleTable([parseRoleGrant(`${ci}=read:w1`), parseRoleGrant(`${ci}=read`)]).of(ci)?.read,
    ).toBe(true);
  });
});

describe("the role declared on each admin method", () => {
  it("every admin method of the contract declares one, and the route table reads it", () => {
    const entries = routeTable([AdminService, RunnerService]);
    const admin = entries.filter((e) => e.principal === "admin");
    expect(admin.length).toBeGreaterThanOrEqual(9);
    expect(Object.fromEntries(admin.map((e) => [e.method.name, e.role]))).toMatchObject({
      EnqueueJob: "enqueue",
      CancelJob: "enqueue",
      GetJob: "read",
      ListJobs: "read",
      ListRunners: "read",
      ListAuditRecords: "read",
      ListCertificates: "read",
      CreateEnrollmentGrant: "admin",
      RetireRunner: "admin",
    });
    expect(entries.filter((e) => e.principal !== "admin").every((e) => e.role === undefined)).toBe(
      true,
    );
  });

  it(
    "an admin method without a role, a role on a runner route, or an enqueue " +
      "method naming no workspace is refused at start-up",
    () => {
      const enqueue = AdminService.method.enqueueJob;
      const listRunners = AdminService.method.listRunners;
      expect(() =>
        checkedRole(
          AdminService,
          enqueue,
          create(RouteSchema, { method: "POST", path: "/x", principal: "admin" }),
        ),
      ).toThrow(
        'an admin route must declare its role (admin, read, enqueue, delegate, granted), not ""',
      );
      expect(() =>
        checkedRole(
          RunnerService,
          RunnerService.method.claim,
          create(RouteSchema, { principal: "runner", role: "admin" }),
        ),
      ).toThrow("role is only for admin routes");
      expect(() =>
        checkedRole(
          AdminService,
          listRunners,
          create(RouteSchema, { principal: "admin", role: "enqueue" }),
        ),
      ).not.toThrow(); // ListRunnersRequest has workspace_id
      expect(() =>
        checkedRole(
          AdminService,
          AdminService.method.listAuditRecords,
          create(RouteSchema, { principal: "admin", role: "enqueue" }),
        ),
      ).toThrow(
        'an "enqueue" method must be unary with a workspace_id, job_id, pipeline_id or schedule_id field',
      );
    },
  );
});
