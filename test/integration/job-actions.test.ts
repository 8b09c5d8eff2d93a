import { describe, expect, it } from "vitest";
import { parseRoleGrant } from "../../src/identity/roles.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane, useServiceClients } from "../support/fixture.js";

// GetJobActions (GET /v1/admin/jobs/{jobId}/actions): whether the caller may retry a job now, by
// the rules RetryJob enforces — the job's enqueuer or an admin, once it settled, once — so the
// dashboard offers Retry exactly to whom the control plane allows it.
const id = (name: string) => `spiffe://forelead/services/${name}`;
const cp = useControlPlane({
  grants: [
    parseRoleGrant(`${id("ja-owner")}=enqueue:ja1`),
    parseRoleGrant(`${id("ja-other")}=enqueue:ja1`),
    parseRoleGrant(`${id("ja-reader")}=read:ja1`),
  ],
});
const service = useServiceClients(cp);

describe(`job actions (${databaseKind})`, () => {
  it("say retry exactly when RetryJob would allow it, and why not otherwise", async () => {
    const [owner, other, reader] = await Promise.all(
      ["ja-owner", "ja-other", "ja-reader"].map(service),
    );
    const admin = cp.admin.rest;
    const enq = await owner!.request("POST", "/v1/admin/jobs", {
      apiVersion: "v1",
      workspaceId: "ja1",
      spec: { image: "busybox", argv: ["true"], timeoutSeconds: 60 },
    });
    expect(enq.status, enq.text).toBe(200);
    const jobId = enq.json.job.id as string;
    const actions = async (client: typeof admin) => {
      const reply = await client.request("GET", `/v1/admin/jobs/${jobId}/actions`);
      expect(reply.status, reply.text).toBe(200);
      return { retry: reply.json.retry ?? false, why: reply.json.retryRefusal ?? "" };
    };
    const retry = (client: typeof admin) =>
      client.request("POST", `/v1/admin/jobs/${jobId}/retry`, { apiVersion: "v1" });

    // Queued: nobody may retry it yet.
    for (const client of [admin, owner!])
      expect(await actions(client)).toEqual({
        retry: false,
        why: `job ${jobId} is still queued; retry it once it settled (or cancel it first)`,
      });
    expect(
      (await owner!.request("POST", `/v1/admin/jobs/${jobId}/cancel`, { apiVersion: "v1" })).status,
    ).toBe(200);

    // Settled: its enqueuer and an admin may; a reader of the workspace may not, and RetryJob
    // refuses it alike; another enqueuer of the workspace may not even read the job.
    expect(await actions(admin)).toEqual({ retry: true, why: "" });
    expect(await actions(reader!)).toEqual({
      retry: false,
      why: `${id("ja-reader")} may retry only the jobs it enqueued (only an admin retries another's)`,
    });
    expect((await retry(reader!)).status).toBe(403);
    expect((await other!.request("GET", `/v1/admin/jobs/${jobId}/actions`)).status).toBe(403);
    expect((await retry(other!)).status).toBe(403);
    expect(await actions(owner!)).toEqual({ retry: true, why: "" });
    const retried = await retry(owner!);
    expect(retried.status, retried.text).toBe(200);

    // Retried: once only.
    const fresh = retried.json.job.id as string;
    for (const client of [admin, owner!])
      expect(await actions(client)).toEqual({
        retry: false,
        why: `job ${jobId} was already retried by job ${fresh}; retry that one to run it again`,
      });
  });
});
