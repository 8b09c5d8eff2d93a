import { execFile } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startControlPlane } from "../../src/server/control-plane.js";
import { createRestClient } from "../support/clients.js";
import { registeredRunner } from "../support/actors.js";
import { startTestControlPlane, type TestControlPlane } from "../support/control-plane.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";
import { enrollRequest, issuerOf, makeCsr, uriSans } from "../support/identity.js";
import { createTestPki } from "../support/pki.js";

const run = promisify(execFile);
const hourMs = 3600_000;

const cp = useControlPlane(async () => {
  const pki = await createTestPki();
  return { pki, ...issuerOf(pki) };
});
const { admin } = cp;
let tmp: string;

beforeAll(async () => {
  tmp = await mkdtemp(path.join(os.tmpdir(), "forelead-enroll-"));
});
afterAll(async () => {
  await rm(tmp, { recursive: true, force: true });
});

async function newGrant(
  body: Record<string, unknown> = {},
): Promise<{ grant: string; grantId: string }> {
  const reply = await admin.rest.request("POST", "/v1/admin/enrollment-grants", {
    apiVersion: "v1",
    workspaceId: "w1",
    ...body,
  });
  expect(reply.status, reply.text).toBe(200);
  return reply.json;
}

describe(`enrollment (${databaseKind})`, () => {
  it(
    "a grant and a CSR made on the runner give a certificate whose only URI " +
      "SAN is the runner identity, whatever SANs the CSR asked for",
    async () => {
      const created = await admin.rest.request("POST", "/v1/admin/enrollment-grants", {
        apiVersion: "v1",
        workspaceId: "w1",
      });
      expect(created.status, created.text).toBe(200);
      expect(created.json.grant).toMatch(/^feg_[A-Za-z0-9_-]{43}$/);
      expect(Date.parse(created.json.expiresAt) - Date.now()).toBeGreaterThan(590_000);
      expect(Date.parse(created.json.expiresAt) - Date.now()).toBeLessThanOrEqual(601_000);

      const { csrPem, keyPem } = await makeCsr({
        sans: [
          { type: "url", value: "spiffe://forelead/services/test-admin" },
          { type: "dns", value: "evil.example" },
        ],
      });
      const reply = await enrollRequest(cp, {
        grant: created.json.grant,
        runnerId: "e1",
        csr: csrPem,
      });
      expect(reply.status, reply.text).toBe(200);
      expect(reply.json).toMatchObject({
        apiVersion: "v1",
        spiffeId: "spiffe://forelead/runners/e1/workspaces/w1",
        workspaceId: "w1",
      });
      const chain = reply.json.certificateChain as string;
      expect(uriSans(chain)).toEqual(["spiffe://forelead/runners/e1/workspaces/w1"]);
      expect(chain).not.toContain("evil.example");

      // The certificate works on the runner routes, on a new connection.
      const runner = createRestClient(cp.url, cp.pki.ca.certPem, { certPem: chain, keyPem });
      const reg = await runner.request("POST", "/v1/runner/register", {
        apiVersion: "v1",
        runnerId: "e1",
        workspaceId: "w1",
        slots: 1,
        labels: ["linux"],
      });
      await runner.close();
      expect(reg.status, reg.text).toBe(200);

      const certs = await admin.rest.request("GET", "/v1/admin/certificates?runnerId=e1");
      expect(certs.json.certificates).toEqual([
        expect.objectContaining({
          spiffeId: "spiffe://forelead/runners/e1/workspaces/w1",
          issuedVia: "enroll",
          status: "current",
        }),
      ]);
    },
  );

  it(
    "openssl x509 -text shows one URI SAN, a lifetime within 24 h, critical " +
      "key usage Digital Signature, EKU client auth and CA:FALSE",
    async () => {
      const { grant } = await newGrant();
      const { csrPem } = await makeCsr();
      const reply = await enrollRequest(cp, { grant, runnerId: "ossl", csr: csrPem });
      expect(reply.status, reply.text).toBe(200);
      const file = path.join(tmp, "ossl.pem");
      await writeFile(file, reply.json.certificateChain);
      const { stdout } = await run("openssl", ["x509", "-in", file, "-noout", "-text"]);

      const sanBlock =
        /X509v3 Subject Alternative Name:[^\n]*\n\s*([^\n]*)/.exec(stdout)?.[1] ?? "";
      expect(sanBlock.trim()).toBe("URI:spiffe://forelead/runners/ossl/workspaces/w1");
      expect(stdout.match(/URI:/g)).toHaveLength(1);
      expect(stdout).toMatch(/X509v3 Key Usage: critical\n\s*Digital Signature\n/);
      expect(stdout).toMatch(/X509v3 Extended Key Usage:\s*\n\s*TLS Web Client Authentication\n/);
      expect(stdout).toMatch(/X509v3 Basic Constraints: critical\n\s*CA:FALSE/);
      expect(stdout).toContain("Public Key Algorithm: id-ecPublicKey");
      expect(stdout).toContain("ASN1 OID: prime256v1");
      expect(stdout).toContain("Signature Algorithm: ecdsa-with-SHA256");
      const notBefore = Date.parse(/Not Before: (.*)/.exec(stdout)![1]!);
      const notAfter = Date.parse(/Not After : (.*)/.exec(stdout)![1]!);
      expect(notAfter - notBefore).toBeLessThanOrEqual(24 * hourMs);
      expect(notAfter - notBefore).toBeGreaterThan(23 * hourMs);
      expect(notBefore).toBeLessThanOrEqual(Date.now());
      // A random serial of 128 bits (at least 64 are required): 16 bytes, possibly 17 with a sign
      // byte.
      const serial = /Serial Number:\s*\n\s*([0-9a-f:]+)/.exec(stdout)![1]!;
      expect(serial.split(":").length).toBeGreaterThanOrEqual(16);
    },
  );

  it(
    "a grant is single use: a second enrollment with it is refused, and of " +
      "two racing enrollments exactly one wins",
    async () => {
      const { grant, grantId } = await newGrant();
      const first = await enrollRequest(cp, {
        grant,
        runnerId: "once",
        csr: (await makeCsr()).csrPem,
      });
      expect(first.status, first.text).toBe(200);
      const second = await enrollRequest(cp, {
        grant,
        runnerId: "twice",
        csr: (await makeCsr()).csrPem,
      });
      expect(second.status).toBe(401);
      expect(second.json.message).toContain(`enrollment grant ${grantId} was already used at`);
      expect(second.json.message).toContain('(runner "once")');
      expect(second.text).not.toContain(grant);

      const race = await newGrant();
      const csrs = await Promise.all([1, 2, 3, 4].map(() => makeCsr()));
      const replies = await Promise.all(
        csrs.map((c, i) =>
          enrollRequest(cp, { grant: race.grant, runnerId: `race${i}`, csr: c.csrPem }),
        ),
      );
      expect(replies.map((r) => r.status).sort()).toEqual([200, 401, 401, 401]);
    },
  );

  it("an expired grant is refused, naming when it expired", async () => {
    const { grant, grantId } = await newGrant({ expiresInSeconds: 60 });
    await sql`update enrollment_grants set expires_at = now() - interval '1 second' where id = ${grantId}`.execute(
      cp.plane.store.db,
    );
    const reply = await enrollRequest(cp, {
      grant,
      runnerId: "late",
      csr: (await makeCsr()).csrPem,
    });
    expect(reply.status).toBe(401);
    expect(reply.json.message).toMatch(
      new RegExp(`enrollment grant ${grantId} expired at \\d{4}-\\d{2}-\\d{2}T`),
    );
  });

  it("a forged CSR (signed by another key than the one it names) is refused and leaves the grant unused", async () => {
    const { grant } = await newGrant();
    const forged = await enrollRequest(cp, {
      grant,
      runnerId: "forger",
      csr: (await makeCsr({ forge: true })).csrPem,
    });
    expect(forged.status).toBe(400);
    expect(forged.json.message).toBe(
      "the csr's signature does not verify with its public key; make the request with the key it names",
    );
    const garbage = await enrollRequest(cp, {
      grant,
      runnerId: "forger",
      csr: "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n",
    });
    expect(garbage.status).toBe(400);
    const honest = await enrollRequest(cp, {
      grant,
      runnerId: "forger",
      csr: (await makeCsr()).csrPem,
    });
    expect(honest.status, honest.text).toBe(200);
  });

  it("keys other than P-256 and Ed25519 are refused; an Ed25519 key enrolls and connects", async () => {
    const { grant } = await newGrant();
    for (const key of ["P-384", "RSA"] as const) {
      const reply = await enrollRequest(cp, {
        grant,
        runnerId: "k1",
        csr: (await makeCsr({ key })).csrPem,
      });
      expect(reply.status).toBe(400);
      expect(reply.json.message).toMatch(
        /^the csr's key is (ec \(secp384r1\)|rsa); only ECDSA P-256 and Ed25519 keys are accepted$/,
      );
    }
    const ed = await makeCsr({ key: "Ed25519" });
    const reply = await enrollRequest(cp, { grant, runnerId: "k1", csr: ed.csrPem });
    expect(reply.status, reply.text).toBe(200);
    const runner = createRestClient(cp.url, cp.pki.ca.certPem, {
      certPem: reply.json.certificateChain,
      keyPem: ed.keyPem,
    });
    const clock = await runner.request("GET", "/v1/runner/clock");
    await runner.close();
    expect(clock.status, clock.text).toBe(200);
  });

  it("a grant for one runner id cannot enroll another, and an unknown or malformed grant is refused", async () => {
    const { grant, grantId } = await newGrant({ runnerId: "only-me" });
    const other = await enrollRequest(cp, {
      grant,
      runnerId: "someone",
      csr: (await makeCsr()).csrPem,
    });
    expect(other.status).toBe(403);
    expect(other.json.message).toBe(
      `the enrollment grant ${grantId} is for runner "only-me"; it cannot enroll runner "someone"`,
    );
    const unknown = await enrollRequest(cp, {
      grant: `feg_${"A".repeat(43)}`,
      runnerId: "x",
      csr: (await makeCsr()).csrPem,
    });
    expect(unknown.status).toBe(401);
    expect(unknown.json.message).toContain("not known to this control plane");
    const malformed = await enrollRequest(cp, {
      grant: "hunter2",
      runnerId: "x",
      csr: (await makeCsr()).csrPem,
    });
    expect(malformed.status).toBe(401);
    expect(malformed.text).not.toContain("hunter2");
    const mine = await enrollRequest(cp, {
      grant,
      runnerId: "only-me",
      csr: (await makeCsr()).csrPem,
    });
    expect(mine.status, mine.text).toBe(200);
  });

  it("a retired runner identity cannot be enrolled again, and the grant stays unused", async () => {
    const retire = await admin.rest.request("POST", "/v1/admin/runners/gone/retire", {
      apiVersion: "v1",
      workspaceId: "w1",
      reason: "decommissioned",
    });
    expect(retire.status, retire.text).toBe(200);
    const { grant } = await newGrant();
    const reply = await enrollRequest(cp, {
      grant,
      runnerId: "gone",
      csr: (await makeCsr()).csrPem,
    });
    expect(reply.status).toBe(403);
    expect(reply.json.message).toContain('runner "gone" in workspace "w1" was retired at');
    const fresh = await enrollRequest(cp, {
      grant,
      runnerId: "gone-2",
      csr: (await makeCsr()).csrPem,
    });
    expect(fresh.status, fresh.text).toBe(200);
  });

  it(
    "enrolling an identity in use (its runner live, a certificate unexpired) is refused and " +
      "audited; a replace grant enrolls it, audited as a replacement",
    async () => {
      const first = await newGrant();
      const enrolled = await enrollRequest(cp, {
        grant: first.grant,
        runnerId: "ra",
        csr: (await makeCsr()).csrPem,
      });
      expect(enrolled.status, enrolled.text).toBe(200);
      await registeredRunner(cp, "ra", "w1");

      const plain = await newGrant({ runnerId: "ra" });
      const refused = await enrollRequest(cp, {
        grant: plain.grant,
        runnerId: "ra",
        csr: (await makeCsr()).csrPem,
      });
      expect(refused.status, refused.text).toBe(400);
      expect(refused.json.code).toBe("failed_precondition");
      expect(refused.json.message).toMatch(
        /^runner "ra" in workspace "w1" is in use: its runner is idle \(last heard from .*\), and a certificate issued for it is valid until .*; enrolling it again would give a second key to the same identity\..*--replace/,
      );
      // The refusal left the grant unused.
      const unused = await sql<{ used_at: Date | null }>`
        select used_at from enrollment_grants where id = ${plain.grantId}`.execute(
        cp.plane.store.db,
      );
      expect(unused.rows[0]?.used_at).toBeNull();

      const replacing = await newGrant({ runnerId: "ra", replace: true });
      expect(replacing).toMatchObject({ replace: true });
      const replaced = await enrollRequest(cp, {
        grant: replacing.grant,
        runnerId: "ra",
        csr: (await makeCsr()).csrPem,
      });
      expect(replaced.status, replaced.text).toBe(200);
      expect(replaced.json.spiffeId).toBe("spiffe://forelead/runners/ra/workspaces/w1");

      const audit = await admin.rest.request("GET", "/v1/admin/audit?pageSize=500");
      expect(audit.status, audit.text).toBe(200);
      const records = audit.json.records as Array<{
        action?: string;
        target?: string;
        reason?: string;
        decision: string;
      }>;
      expect(
        records.filter(
          (r) =>
            r.action === "grant.use" &&
            r.decision === "deny" &&
            r.reason?.includes('runner "ra" in workspace "w1" is in use'),
        ),
      ).toHaveLength(1);
      const replacement = records.filter((r) => r.action === "runner.replace");
      expect(replacement).toHaveLength(1);
      expect(replacement[0]).toMatchObject({
        decision: "allow",
        target: 'runner "ra" in workspace "w1"',
      });
      expect(replacement[0]!.reason).toMatch(
        new RegExp(
          `^enrolled again with replace grant ${replacing.grantId} .* while in use: its runner is idle`,
        ),
      );
    },
  );

  it("grant requests are checked: workspace and runner id shapes, expiry bounds", async () => {
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ workspaceId: "" }, "workspaceId"],
      [{ workspaceId: "w/1" }, "workspaceId"],
      [{ runnerId: "a b" }, "runnerId"],
      [{ expiresInSeconds: 86_401 }, "expiresInSeconds must be 1 to 86400"],
      [{ expiresInSeconds: -5 }, "expiresInSeconds must be 1 to 86400"],
    ];
    for (const [body, message] of cases) {
      const reply = await admin.rest.request("POST", "/v1/admin/enrollment-grants", {
        apiVersion: "v1",
        workspaceId: "w1",
        ...body,
      });
      expect(reply.status, JSON.stringify(body)).toBe(400);
      expect(reply.json.message).toContain(message);
    }
  });
});

describe(`a control plane without an issuer (${databaseKind})`, () => {
  let plain: TestControlPlane;
  beforeAll(async () => {
    plain = await startTestControlPlane();
  });
  afterAll(async () => plain?.close());

  it("still verifies certificates from an external CA, and refuses enrollment and renewal saying why", async () => {
    const enroll = await enrollRequest(plain, {
      grant: `feg_${"A".repeat(43)}`,
      runnerId: "x",
      csr: (await makeCsr()).csrPem,
    });
    expect(enroll.status).toBe(400);
    expect(enroll.json).toEqual({
      code: "failed_precondition",
      message: expect.stringContaining(
        "this control plane has no issuing CA, so it cannot enroll or renew " +
          "runners; start forelead serve with --issuer-cert and --issuer-key",
      ),
    });
    const runner = createRestClient(
      plain.url,
      plain.pki.ca.certPem,
      await plain.pki.runner("ext", "w1"),
    );
    expect((await runner.request("GET", "/v1/runner/clock")).status).toBe(200);
    const renew = await runner.request("POST", "/v1/runner/certificate", {
      apiVersion: "v1",
      csr: (await makeCsr()).csrPem,
    });
    await runner.close();
    expect(renew.status).toBe(400);
    expect(renew.json.message).toContain("this control plane has no issuing CA");
  });

  it(
    "refuses to start with an issuer the client trust bundle does not trust, " +
      "or with a key that is not the issuer's",
    async () => {
      // The issuer is checked before the database is opened, so no database is needed here.
      const base = {
        host: "127.0.0.1",
        port: 0,
        tlsCertPem: plain.pki.server.certPem,
        tlsKeyPem: plain.pki.server.keyPem,
        clientCaPem: plain.pki.ca.certPem,
        trustDomain: "forelead",
        database: "memory://",
        admins: [],
        leaseSeconds: 30,
        maxCertLifetimeMs: 24 * hourMs,
      };
      const stranger = await createTestPki();
      await expect(
        startControlPlane({
          ...base,
          issuer: { certPem: stranger.ca.certPem, keyPem: stranger.ca.keyPem },
        }),
      ).rejects.toThrow(
        /is not trusted by the client CA bundle; add it \(or its root\) to --client-ca/,
      );
      await expect(
        startControlPlane({
          ...base,
          issuer: { certPem: plain.pki.ca.certPem, keyPem: stranger.ca.keyPem },
        }),
      ).rejects.toThrow(
        "the issuer cannot sign runner certificates: CA private key does not match the CA certificate",
      );
      await expect(
        startControlPlane({ ...base, ...issuerOf(plain.pki), issuedCertLifetimeMs: 25 * hourMs }),
      ).rejects.toThrow(/over the maximum/);
    },
  );
});
