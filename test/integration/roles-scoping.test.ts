import { describe, expect, it, vi } from "vitest";
import { ConnectError } from "@connectrpc/connect";
import { sql } from "kysely";
import { AdminService } from "../../gen/forelead/admin/v1/admin_pb.js";
import { parseRoleGrant } from "../../src/identity/roles.js";
import { jobBody, registeredRunner } from "../support/actors.js";
import { createTestClient, type RestClient } from "../support/clients.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane, useServiceClients } from "../support/fixture.js";

const id = (name: string) => `spiffe://forelead/services/${name}`;

const cp = useControlPlane({
  grants: [
    parseRoleGrant(`${id("reader")}=read:w1`),
    parseRoleGrant(`${id("ci")}=enqueue:w1`),
    parseRoleGrant(`${id("ci2")}=enqueue:w1`),
    parseRoleGrant(`${id("dash")}=read`),
  ],
});
const { admin } = cp;
const service = useServiceClients(cp);

async function enqueued(client: RestClient, body: Record<string, unknown>): Promise<string> {
  const reply = await client.request("POST", "/v1/admin/jobs", jobBody(body));
  expect(reply.status, reply.text).toBe(200);
  return reply.json.job.id as string;
}
const listed = async (client: RestClient, query = "") => {
  const reply = await client.request("GET", `/v1/admin/jobs?pageSize=500${query}`);
  expect(reply.status, reply.text).toBe(200);
  return (reply.json.jobs ?? []) as {
    id: string;
    workspaceId: string;
    spec?: { env?: Record<string, string> };
  }[];
};

describe(`roles scoped to workspaces (${databaseKind})`, () => {
  it(
    "read:w1 sees w1's jobs and none of w2's: get, logs, events and " +
      "artifacts 403, a list without a filter shows w1 only, workspaceId=w2 is " +
      "403",
    async () => {
      const reader = await service("reader");
      const inW1 = (await admin.enqueue({ workspaceId: "w1" })).json.job.id as string;
      const inW2 = (await admin.enqueue({ workspaceId: "w2" })).json.job.id as string;
      expect((await reader.request("GET", `/v1/admin/jobs/${inW1}`)).status).toBe(200);
      const refusal =
        `${id("reader")} may read only in workspaces "w1" and on the jobs it ` +
        `enqueued, not on job ${inW2} in workspace "w2"; grant it with --grant ` +
        `${id("reader")}=read:w2`;
      for (const path of [
        `/v1/admin/jobs/${inW2}`,
        `/v1/admin/jobs/${inW2}/logs`,
        `/v1/admin/jobs/${inW2}/events`,
        `/v1/admin/jobs/${inW2}/artifacts`,
      ]) {
        const reply = await reader.request("GET", path);
        expect(reply.status, path).toBe(403);
        expect(reply.json.message, path).toBe(refusal);
      }
      expect((await reader.request("GET", `/v1/admin/jobs/${inW1}/logs`)).status).toBe(200);
      const all = await listed(reader);
      expect(all.map((j) => j.id)).toContain(inW1);
      expect(new Set(all.map((j) => j.workspaceId))).toEqual(new Set(["w1"]));
      expect((await listed(reader, "&workspaceId=w1")).map((j) => j.id)).toContain(inW1);
      const other = await reader.request("GET", "/v1/admin/jobs?workspaceId=w2");
      expect(other.status).toBe(403);
      expect(other.json.message).toBe(
        `${id("reader")} may read only in workspaces "w1", not in workspace ` +
          `"w2"; grant it with --grant ${id("reader")}=read:w2`,
      );
      // Through a generated client the same refusal.
      const rpc = createTestClient(
        AdminService,
        cp.url,
        cp.pki.ca.certPem,
        await cp.pki.service("reader"),
        "connect-json",
      );
      await expect(rpc.getJob({ jobId: inW2 })).rejects.toThrow(refusal);
    },
  );

  it(
    "read:w1 lists runners and inventory of w1 only; without a workspace it " +
      "is told which to name; the audit trail and certificates stay global",
    async () => {
      const reader = await service("reader");
      await (await registeredRunner(cp, "rs1", "w1")).close();
      await (await registeredRunner(cp, "rs2", "w2")).close();
      const runners = await reader.request("GET", "/v1/admin/runners?workspaceId=w1");
      expect(runners.status, runners.text).toBe(200);
      expect(runners.json.runners.map((r: { runnerId: string }) => r.runnerId)).toEqual(["rs1"]);
      expect((await reader.request("GET", "/v1/admin/inventory?workspaceId=w1")).status).toBe(200);
      for (const path of [
        "/v1/admin/runners?workspaceId=w2",
        "/v1/admin/inventory?workspaceId=w2",
        "/v1/admin/orphans?workspaceId=w2",
        "/v1/admin/reap-orders?workspaceId=w2",
      ]) {
        const reply = await reader.request("GET", path);
        expect(reply.status, path).toBe(403);
        expect(reply.json.message, path).toContain(`--grant ${id("reader")}=read:w2`);
      }
      const unnamed = await reader.request("GET", "/v1/admin/runners");
      expect(unnamed.status).toBe(403);
      expect(unnamed.json.message).toBe(
        `${id("reader")} may read only in workspaces "w1"; name one with ` +
          `workspaceId, or grant every workspace with --grant ${id("reader")}=read`,
      );
      for (const [path, method] of [
        ["/v1/admin/audit", "ListAuditRecords"],
        ["/v1/admin/certificates?workspaceId=w1", "ListCertificates"],
      ] as const) {
        const reply = await reader.request("GET", path);
        expect(reply.status, path).toBe(403);
        expect(reply.json.message).toBe(
          `${id("reader")} lacks the "read" role that ${method} needs: it covers ` +
            `every workspace (start forelead serve with --grant ${id("reader")}=read)`,
        );
      }
    },
  );

  it("enqueue:w1 reads and cancels its own job and no one else's, also in w1", async () => {
    const ci = await service("ci");
    const ci2 = await service("ci2");
    const mine = await enqueued(ci, { workspaceId: "w1" });
    const theirs = await enqueued(ci2, { workspaceId: "w1" });
    const byAdmin = (await admin.enqueue({ workspaceId: "w1" })).json.job.id as string;
    for (const path of [
      `/v1/admin/jobs/${mine}`,
      `/v1/admin/jobs/${mine}/logs`,
      `/v1/admin/jobs/${mine}/events`,
      `/v1/admin/jobs/${mine}/artifacts`,
    ]) {
      const reply = await ci.request("GET", path);
      expect(reply.status, `${path}: ${reply.text}`).toBe(200);
    }
    for (const other of [theirs, byAdmin]) {
      const read = await ci.request("GET", `/v1/admin/jobs/${other}`);
      expect(read.status).toBe(403);
      expect(read.json.message).toBe(
        `${id("ci")} has no "read" role in any workspace and on the jobs it ` +
          `enqueued, not on job ${other} in workspace "w1"; grant it with --grant ` +
          `${id("ci")}=read:w1`,
      );
      const cancel = await ci.request("POST", `/v1/admin/jobs/${other}/cancel`, {
        apiVersion: "v1",
      });
      expect(cancel.status).toBe(403);
      expect(cancel.json.message).toBe(
        `${id("ci")} may cancel only the jobs it enqueued; job ${other} in ` +
          `workspace "w1" is another identity's (only --grant ${id("ci")}=admin ` +
          `allows it)`,
      );
      expect((await admin.job(other)).json.job.state).toBe("queued");
    }
    // Its listing holds its own jobs only, with or without naming w1.
    expect((await listed(ci)).map((j) => j.id)).toEqual([mine]);
    expect((await listed(ci, "&workspaceId=w1")).map((j) => j.id)).toEqual([mine]);
    expect((await ci.request("GET", "/v1/admin/jobs?workspaceId=w2")).status).toBe(403);
    const cancelled = await ci.request("POST", `/v1/admin/jobs/${mine}/cancel`, {
      apiVersion: "v1",
    });
    expect(cancelled.status, cancelled.text).toBe(200);
    expect(cancelled.json.job.state).toBe("cancelled");
    // Repeating another identity's idempotency key does not hand back its job.
    const key = { workspaceId: "w1", idempotencyKey: "ci2-key" };
    const first = await ci2.request("POST", "/v1/admin/jobs", jobBody(key));
    expect((await ci2.request("POST", "/v1/admin/jobs", jobBody(key))).json.job.id).toBe(
      first.json.job.id,
    );
    const repeat = await ci.request("POST", "/v1/admin/jobs", jobBody(key));
    expect(repeat.status).toBe(409);
    expect(repeat.json.message).toBe(
      'idempotencyKey "ci2-key" was already used in workspace "w1" by another identity; use a new key',
    );
    expect(repeat.text).not.toContain(first.json.job.id);
    // The admin cancels anyone's.
    expect((await admin.cancel(theirs)).json.job.state).toBe("cancelled");
  });

  it(
    "an identity whose grants were withdrawn still reads and cancels the " +
      "jobs it enqueued, and nothing else",
    async () => {
      const former = await service("former");
      const jobId = (await admin.enqueue({ workspaceId: "w1" })).json.job.id as string;
      // The job as "former" enqueued it while it held enqueue:w1, a grant this configuration no
      // longer has.
      await sql`update jobs set enqueued_by = ${id("former")} where id = ${jobId}`.execute(
        cp.plane.store.db,
      );
      expect((await former.request("GET", `/v1/admin/jobs/${jobId}`)).status).toBe(200);
      expect(
        (await former.request("POST", `/v1/admin/jobs/${jobId}/cancel`, { apiVersion: "v1" })).json
          .job.state,
      ).toBe("cancelled");
      const other = (await admin.enqueue({ workspaceId: "w1" })).json.job.id as string;
      expect((await former.request("GET", `/v1/admin/jobs/${other}`)).status).toBe(403);
      const list = await former.request("GET", "/v1/admin/jobs");
      expect(list.status).toBe(403);
      expect(list.json.message).toBe(
        `${id("former")} is granted no role; ListJobs needs the "read" role ` +
          `(start forelead serve with --grant ${id("former")}=read)`,
      );
    },
  );

  it("global read sees every workspace's jobs", async () => {
    const dash = await service("dash");
    const inW1 = (await admin.enqueue({ workspaceId: "w1" })).json.job.id as string;
    const inW2 = (await admin.enqueue({ workspaceId: "w2" })).json.job.id as string;
    expect((await dash.request("GET", `/v1/admin/jobs/${inW2}`)).status).toBe(200);
    expect((await listed(dash)).map((j) => j.id)).toEqual(expect.arrayContaining([inW1, inW2]));
    expect((await dash.request("GET", "/v1/admin/runners")).status).toBe(200);
  });
});

describe(`secret-looking env values in job views (${databaseKind})`, () => {
  const env = {
    API_TOKEN: "tok-value-1",
    DB_PASSWORD: "pw-value-2",
    BASIC_AUTH: "auth-value-3",
    PLAIN: "visible",
    AUTHOR: "also visible",
  };
  const masked = {
    API_TOKEN: "***",
    DB_PASSWORD: "***",
    BASIC_AUTH: "***",
    PLAIN: "visible",
    AUTHOR: "also visible",
  };
  const secretValues = ["tok-value-1", "pw-value-2", "auth-value-3"];

  it(
    "are *** in the enqueue reply, GetJob, ListJobs and CancelJob for admin " +
      "and read, while the runner's lease has the real values",
    async () => {
      const ws = "wsecret";
      const runner = await registeredRunner(cp, "rsec", ws);
      const dash = await service("dash");
      const enq = await admin.enqueue({
        workspaceId: ws,
        spec: { image: "busybox", argv: ["true"], timeoutSeconds: 60, env },
      });
      expect(enq.status, enq.text).toBe(200);
      expect(enq.json.job.spec.env).toEqual(masked);
      const jobId = enq.json.job.id as string;
      for (const client of [admin.rest, dash]) {
        const one = await client.request("GET", `/v1/admin/jobs/${jobId}`);
        expect(one.json.job.spec.env).toEqual(masked);
        const list = await client.request("GET", `/v1/admin/jobs?workspaceId=${ws}`);
        expect(list.json.jobs[0].spec.env).toEqual(masked);
        for (const value of secretValues) expect(one.text + list.text).not.toContain(value);
      }
      const rpc = createTestClient(
        AdminService,
        cp.url,
        cp.pki.ca.certPem,
        await cp.pki.service("dash"),
        "connect-binary",
      );
      expect((await rpc.getJob({ jobId })).job?.spec?.env).toEqual(masked);
      const claim = await runner.claim();
      expect(claim.status, claim.text).toBe(200);
      expect(claim.json.job.spec.env).toEqual(env);
      const cancel = await admin.cancel(jobId);
      expect(cancel.json.job.spec.env).toEqual(masked);
      await runner.close();
    },
  );

  it(
    "a NUL in an env value or name, a label or an idempotency key is a 400 " +
      "naming the field, never echoing the value, on REST and Connect nor in " +
      "the server's log",
    async () => {
      const value = "hunter2\u0000tail";
      // The server runs in this process: whatever it logs meanwhile is captured and searched.
      const logged: string[] = [];
      const spies = (["log", "error", "warn"] as const).map((level) =>
        vi
          .spyOn(console, level)
          .mockImplementation((...args: unknown[]) => void logged.push(args.map(String).join(" "))),
      );
      const cases = [
        [
          "spec.env.API_TOKEN",
          {
            spec: {
              image: "busybox",
              argv: ["true"],
              timeoutSeconds: 60,
              env: { API_TOKEN: value },
            },
          },
        ],
        [
          "spec.env key",
          {
            spec: {
              image: "busybox",
              argv: ["true"],
              timeoutSeconds: 60,
              env: { [`K${value}`]: "v" },
            },
          },
        ],
        ["labels[0]", { labels: [value] }],
        ["idempotencyKey", { idempotencyKey: value }],
      ] as const;
      const rpc = createTestClient(
        AdminService,
        cp.url,
        cp.pki.ca.certPem,
        await cp.pki.service("test-admin"),
        "connect-json",
      );
      for (const [field, body] of cases) {
        const reply = await admin.enqueue({ workspaceId: "wnul", ...body });
        expect(reply.status, reply.text).toBe(400);
        expect(reply.json.message).toContain(`field "${field}" contains NUL (U+0000)`);
        expect(reply.text).not.toContain("hunter2");
        const err = await rpc
          .enqueueJob({
            apiVersion: "v1",
            workspaceId: "wnul",
            labels: ["linux"],
            spec: { image: "busybox", argv: ["true"], timeoutSeconds: 60 },
            ...body,
          } as never)
          .then(
            () => undefined,
            (e: unknown) => ConnectError.from(e),
          );
        expect(err?.rawMessage).toContain(`field "${field}" contains NUL (U+0000)`);
        expect(err?.rawMessage).not.toContain("hunter2");
      }
      for (const spy of spies) spy.mockRestore();
      expect(logged.filter((line) => line.includes("hunter2"))).toEqual([]);
      const stored = await sql<{
        n: string;
      }>`select count(*) as n from jobs where workspace_id = 'wnul'`.execute(cp.plane.store.db);
      expect(Number(stored.rows[0]!.n)).toBe(0);
    },
  );
});
