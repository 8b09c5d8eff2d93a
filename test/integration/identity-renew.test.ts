import { mkdtemp, rm, stat } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { enroll, type ControlPlaneEndpoint } from "../../src/runner/identity/enrollment.js";
import { keepIdentityFresh } from "../../src/runner/identity/keeper.js";
import type { RunnerIdentity } from "../../src/runner/identity/runner-identity.js";
import { loadIdentity } from "../../src/runner/identity/state-dir.js";
import { createRunnerClient } from "../../src/runner/transport/client.js";
import { createRestTransport } from "../../src/runner/transport/rest-transport.js";
import { eventually } from "../support/actors.js";
import { createRestClient } from "../support/clients.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";
import { issuerOf, makeCsr, uriSans } from "../support/identity.js";
import { createTestPki } from "../support/pki.js";

/** Short enough to watch a renewal happen and the old certificate expire within one test. */
const lifetimeMs = 20_000;

const cp = useControlPlane(async () => {
  const pki = await createTestPki();
  return { pki, ...issuerOf(pki), issuedCertLifetimeMs: lifetimeMs };
});
const { admin } = cp;
let endpoint: ControlPlaneEndpoint;
let tmp: string;

beforeAll(async () => {
  endpoint = { server: cp.url, caPem: cp.pki.ca.certPem };
  tmp = await mkdtemp(path.join(os.tmpdir(), "forelead-renew-"));
});
afterAll(async () => {
  await rm(tmp, { recursive: true, force: true });
});

async function enrolled(
  runnerId: string,
  workspaceId: string,
): Promise<{ identity: RunnerIdentity; stateDir: string }> {
  const grant = await admin.rest.request("POST", "/v1/admin/enrollment-grants", {
    apiVersion: "v1",
    workspaceId,
    runnerId,
  });
  expect(grant.status, grant.text).toBe(200);
  const stateDir = path.join(tmp, runnerId);
  return {
    identity: await enroll(endpoint, { grant: grant.json.grant, runnerId, stateDir }),
    stateDir,
  };
}

describe(`certificate renewal (${databaseKind})`, () => {
  it(
    "the runner renews before expiry at about half its lifetime and " +
      "reconnects with the new certificate while its job keeps running",
    { timeout: 90_000 },
    async () => {
      const { identity: first, stateDir } = await enrolled("rn1", "wr1");
      const keeper = keepIdentityFresh(endpoint, first, { stateDir });
      // Wired as `forelead runner` wires it (cli/runner.ts): each new handshake reads the keeper's
      // current certificate, and a renewal makes the transport open a new session.
      const tls = () => ({
        ca: endpoint.caPem,
        cert: keeper.current().certPem,
        key: keeper.current().keyPem,
      });
      const transport = createRestTransport(cp.url, tls);
      keeper.onRenewed(() => transport.reconnect());
      const client = createRunnerClient(transport, "rn1", "wr1");
      const renewed = new Promise<{ identity: RunnerIdentity; at: number }>((resolve) =>
        keeper.onRenewed((identity) => resolve({ identity, at: Date.now() })),
      );
      try {
        await client.register({
          slots: 1,
          cpu: 1,
          memoryBytes: 1024 ** 3,
          architecture: "amd64",
          labels: ["linux"],
          clockOffsetNs: 0n,
        });
        const jobId = (await admin.enqueue({ workspaceId: "wr1" })).json.job.id;
        const [lease] = await client.claim(5);
        expect(lease?.job?.id).toBe(jobId);
        const token = lease!.token;

        const { identity: second, at } = await renewed;
        // Before expiry, around half the lifetime (40-60 % with jitter; generous bounds for a busy
        // machine).
        expect(at).toBeLessThan(first.notAfter.getTime());
        const lifetime = first.notAfter.getTime() - first.notBefore.getTime();
        expect(at - first.notBefore.getTime()).toBeGreaterThanOrEqual(lifetime * 0.4 - 50);
        expect(second.spiffeId).toBe(first.spiffeId);
        expect(second.serialHex).not.toBe(first.serialHex);
        expect(second.keyPem).not.toBe(first.keyPem);
        expect(uriSans(second.certPem)).toEqual(["spiffe://forelead/runners/rn1/workspaces/wr1"]);
        // Written to the state directory, 0600.
        expect((await loadIdentity(stateDir)).serialHex).toBe(keeper.current().serialHex);
        for (const f of ["cert.pem", "key.pem"])
          expect((await stat(path.join(stateDir, f))).mode & 0o777).toBe(0o600);

        // The next request goes on a new connection, with the new certificate; the lease carries
        // on.
        await client.renew(jobId, token);
        await cp.plane.audit.flush();
        const audit = await admin.rest.request(
          "GET",
          `/v1/admin/audit?spiffeId=${encodeURIComponent(first.spiffeId)}&kind=decision&pageSize=1`,
        );
        expect(audit.json.records[0]).toMatchObject({
          route: "POST /v1/runner/renew",
          decision: "allow",
          certificateSerial: second.serialHex,
        });

        // Once the first certificate has expired, the job still renews and completes: nothing uses
        // the old one.
        await eventually(
          "the first certificate to expire",
          async () => (Date.now() > first.notAfter.getTime() + 1000 ? true : undefined),
          40_000,
          200,
        );
        const stale = createRestClient(cp.url, endpoint.caPem, first);
        const refused = await stale.request("GET", "/v1/runner/clock");
        await stale.close();
        expect(refused.status).toBe(401);
        expect(refused.json.message).toContain("the client certificate expired at");
        await client.renew(jobId, token);
        await client.complete(jobId, token, {
          completionId: "c1",
          outcome: "succeeded",
          exitCode: 0,
        });
        expect((await admin.job(jobId)).json.job.state).toBe("succeeded");
      } finally {
        keeper.stop();
        await client.close();
      }
    },
  );

  it("renewal names the caller's identity whatever the CSR asks for, and refuses a forged CSR", async () => {
    const { identity } = await enrolled("rn2", "wr2");
    const rest = createRestClient(cp.url, endpoint.caPem, identity);
    const asked = await makeCsr({
      sans: [{ type: "url", value: "spiffe://forelead/runners/other/workspaces/wr9" }],
    });
    const ok = await rest.request("POST", "/v1/runner/certificate", {
      apiVersion: "v1",
      csr: asked.csrPem,
    });
    expect(ok.status, ok.text).toBe(200);
    expect(ok.json.spiffeId).toBe(identity.spiffeId);
    expect(uriSans(ok.json.certificateChain)).toEqual([identity.spiffeId]);
    const forged = await rest.request("POST", "/v1/runner/certificate", {
      apiVersion: "v1",
      csr: (await makeCsr({ forge: true })).csrPem,
    });
    expect(forged.status).toBe(400);
    expect(forged.json.message).toContain("signature does not verify");
    const certs = await admin.rest.request(
      "GET",
      "/v1/admin/certificates?runnerId=rn2&all=true&expiringWithinSeconds=1",
    );
    expect(
      certs.json.certificates.map((c: { issuedVia: string; status: string }) => [
        c.issuedVia,
        c.status,
      ]),
    ).toEqual([
      ["renew", "current"],
      ["enroll", "superseded"],
    ]);
    await rest.close();
  });

  it("a retired runner cannot renew, and the keeper stops retrying", async () => {
    const { identity, stateDir } = await enrolled("rn3", "wr3");
    const retire = await admin.rest.request("POST", "/v1/admin/runners/rn3/retire", {
      apiVersion: "v1",
      workspaceId: "wr3",
    });
    expect(retire.status).toBe(200);
    const errors: Array<{ message: string; retry: number | undefined }> = [];
    const keeper = keepIdentityFresh(endpoint, identity, {
      stateDir,
      onError: (err, retry) => errors.push({ message: err.message, retry }),
    });
    await expect(keeper.renewNow()).rejects.toThrow(
      /403 permission_denied: runner "rn3" in workspace "wr3" was retired at/,
    );
    keeper.stop();
    expect(errors).toEqual([{ message: expect.stringContaining("was retired"), retry: undefined }]);
    expect((await loadIdentity(stateDir)).serialHex).toBe(identity.serialHex);
  });
});
