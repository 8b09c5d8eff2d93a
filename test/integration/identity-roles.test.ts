import { Code } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { AdminService } from "../../gen/forelead/admin/v1/admin_pb.js";
import { parseRoleGrant } from "../../src/identity/roles.js";
import { startControlPlane } from "../../src/server/control-plane.js";
import { jobBody, runnerActor } from "../support/actors.js";
import { createTestClient } from "../support/clients.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane, useServiceClients } from "../support/fixture.js";

const id = (name: string) => `spiffe://forelead/services/${name}`;

const cp = useControlPlane({
  grants: [
    parseRoleGrant(`${id("ci")}=enqueue:w1,w2`),
    parseRoleGrant(`${id("dash")}=read`),
    parseRoleGrant(`${id("both")}=read`),
    parseRoleGrant(`${id("both")}=enqueue:w3`),
    parseRoleGrant(`${id("ops")}=admin`),
  ],
});
const { admin } = cp;
const service = useServiceClients(cp);

describe(`roles on admin methods (${databaseKind})`, () => {
  it("a runner identity calling any admin method is refused, on REST and through a generated client", async () => {
    const runner = await runnerActor(cp, "r1", "w1");
    for (const [method, path, body] of [
      ["POST", "/v1/admin/jobs", jobBody()],
      ["GET", "/v1/admin/jobs", undefined],
      ["GET", "/v1/admin/audit", undefined],
      ["POST", "/v1/admin/enrollment-grants", { apiVersion: "v1", workspaceId: "w1" }],
      ["POST", "/v1/admin/runners/r1/retire", { apiVersion: "v1", workspaceId: "w1" }],
    ] as const) {
      const reply = await runner.rest.request(method, path, body);
      expect(reply.status, `${method} ${path}`).toBe(403);
      expect(reply.json.message).toMatch(
        /is an admin method; runner identities \(spiffe:\/\/forelead\/runners\/r1\/workspaces\/w1\) can never call admin methods$/,
      );
    }
    await runner.close();
    const rpc = createTestClient(
      AdminService,
      cp.url,
      cp.pki.ca.certPem,
      await cp.pki.runner("r1", "w1"),
      "grpc",
    );
    await expect(rpc.listRunners({})).rejects.toMatchObject({ code: Code.PermissionDenied });
  });

  it("enqueue:w1,w2 may enqueue in w1 and w2; another workspace is refused with 403 naming it", async () => {
    const ci = await service("ci");
    expect(
      (await ci.request("POST", "/v1/admin/jobs", jobBody({ workspaceId: "w1" }))).status,
    ).toBe(200);
    expect(
      (await ci.request("POST", "/v1/admin/jobs", jobBody({ workspaceId: "w2" }))).status,
    ).toBe(200);
    const other = await ci.request("POST", "/v1/admin/jobs", jobBody({ workspaceId: "w9" }));
    expect(other.status).toBe(403);
    expect(other.json.message).toBe(
      `${id("ci")} may enqueue only in workspaces "w1", "w2", not in workspace ` +
        `"w9"; grant it with --grant ${id("ci")}=enqueue:w9`,
    );
  });

  it("enqueue may cancel only the jobs it enqueued; the job's enqueuer is looked up", async () => {
    const ci = await service("ci");
    const mine = (await ci.request("POST", "/v1/admin/jobs", jobBody({ workspaceId: "w1" }))).json
      .job.id;
    const theirs = (await admin.enqueue({ workspaceId: "w9" })).json.job.id;
    const ok = await ci.request("POST", `/v1/admin/jobs/${mine}/cancel`, { apiVersion: "v1" });
    expect(ok.status, ok.text).toBe(200);
    expect(ok.json.job.state).toBe("cancelled");
    const refused = await ci.request("POST", `/v1/admin/jobs/${theirs}/cancel`, {
      apiVersion: "v1",
    });
    expect(refused.status).toBe(403);
    expect(refused.json.message).toBe(
      `${id("ci")} may cancel only the jobs it enqueued; job ${theirs} in ` +
        `workspace "w9" is another identity's (only --grant ${id("ci")}=admin ` +
        `allows it)`,
    );
    expect((await admin.job(theirs)).json.job.state).toBe("queued");
    const unknown = await ci.request(
      "POST",
      "/v1/admin/jobs/0190f1e2-3c4d-7e5f-8a9b-0c1d2e3f4a5b/cancel",
      { apiVersion: "v1" },
    );
    expect(unknown.status).toBe(404);
  });

  it("enqueue alone cannot read others' jobs, create grants, retire or read the audit trail", async () => {
    const ci = await service("ci");
    for (const [method, path, body, role] of [
      ["GET", "/v1/admin/audit", undefined, "read"],
      ["GET", "/v1/admin/certificates", undefined, "read"],
      ["POST", "/v1/admin/enrollment-grants", { apiVersion: "v1", workspaceId: "w1" }, "admin"],
      ["POST", "/v1/admin/runners/r1/retire", { apiVersion: "v1", workspaceId: "w1" }, "admin"],
    ] as const) {
      const reply = await ci.request(method, path, body);
      expect(reply.status, `${method} ${path}`).toBe(403);
      expect(reply.json.message).toContain(`${id("ci")} lacks the "${role}" role`);
      expect(reply.json.message).toContain(`--grant ${id("ci")}=${role}`);
    }
  });

  it(
    "read may list jobs, runners, certificates and the audit trail, but not " +
      "enqueue, cancel, grant or retire",
    async () => {
      const dash = await service("dash");
      for (const path of [
        "/v1/admin/jobs",
        "/v1/admin/runners",
        "/v1/admin/audit?pageSize=5",
        "/v1/admin/certificates",
      ]) {
        const reply = await dash.request("GET", path);
        expect(reply.status, `${path}: ${reply.text}`).toBe(200);
      }
      const jobId = (await admin.enqueue({ workspaceId: "w1" })).json.job.id;
      expect((await dash.request("GET", `/v1/admin/jobs/${jobId}`)).status).toBe(200);
      const enq = await dash.request("POST", "/v1/admin/jobs", jobBody());
      expect(enq.status).toBe(403);
      expect(enq.json.message).toBe(
        `${id("dash")} lacks the "enqueue" role that EnqueueJob needs (start ` +
          `forelead serve with --grant ${id("dash")}=enqueue:WORKSPACE)`,
      );
      expect(
        (await dash.request("POST", `/v1/admin/jobs/${jobId}/cancel`, { apiVersion: "v1" })).status,
      ).toBe(403);
      expect(
        (
          await dash.request("POST", "/v1/admin/enrollment-grants", {
            apiVersion: "v1",
            workspaceId: "w1",
          })
        ).status,
      ).toBe(403);
    },
  );

  it("roles granted to one identity add up; admin (--grant ID=admin or --admin) may do everything", async () => {
    const both = await service("both");
    expect((await both.request("GET", "/v1/admin/jobs")).status).toBe(200);
    expect(
      (await both.request("POST", "/v1/admin/jobs", jobBody({ workspaceId: "w3" }))).status,
    ).toBe(200);
    expect(
      (await both.request("POST", "/v1/admin/jobs", jobBody({ workspaceId: "w1" }))).status,
    ).toBe(403);
    const ops = await service("ops");
    expect(
      (await ops.request("POST", "/v1/admin/jobs", jobBody({ workspaceId: "anywhere" }))).status,
    ).toBe(200);
    expect(
      (
        await ops.request("POST", "/v1/admin/enrollment-grants", {
          apiVersion: "v1",
          workspaceId: "w1",
        })
      ).status,
    ).toBe(200);
    expect((await admin.rest.request("GET", "/v1/admin/audit?pageSize=1")).status).toBe(200);
  });

  it("an identity granted nothing is refused, saying which role the method needs", async () => {
    const nobody = await service("nobody");
    const reply = await nobody.request("GET", "/v1/admin/jobs");
    expect(reply.status).toBe(403);
    expect(reply.json.message).toBe(
      `${id("nobody")} is granted no role; ListJobs needs the "read" role ` +
        `(start forelead serve with --grant ${id("nobody")}=read)`,
    );
  });

  it("the configuration cannot grant a role to a runner identity", async () => {
    expect(() => parseRoleGrant("spiffe://forelead/runners/r1/workspaces/w1=admin")).toThrow(
      "is a runner identity; runners never call admin methods, so it cannot be granted a role",
    );
    const base = {
      host: "127.0.0.1",
      port: 0,
      tlsCertPem: cp.pki.server.certPem,
      tlsKeyPem: cp.pki.server.keyPem,
      clientCaPem: cp.pki.ca.certPem,
      trustDomain: "forelead",
      database: "memory://",
      leaseSeconds: 30,
      maxCertLifetimeMs: 24 * 3600_000,
    };
    await expect(
      startControlPlane({ ...base, admins: ["spiffe://forelead/runners/r1/workspaces/w1"] }),
    ).rejects.toThrow("is a runner identity");
  });
});
