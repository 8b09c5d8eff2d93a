import { X509Certificate } from "node:crypto";
import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { newJobId } from "../../src/broker/ids.js";
import { networkName } from "../../src/inventory/names.js";
import { jobBody, runnerActor } from "../support/actors.js";
import { createRestClient, type RestClient } from "../support/clients.js";
import { testAdminId } from "../support/control-plane.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";
import { enrollRequest, issuerOf, makeCsr } from "../support/identity.js";
import { createTestPki } from "../support/pki.js";

// The audit trail: every Must-show scenario of the identity issue is played
// once against one control plane, then the records are read back through
// GET /v1/admin/audit and checked field by field; finally every stored audit
// row, every stored grant row and everything the server printed are searched
// for the secrets the scenarios used.

interface Rec {
  id: string;
  at: string;
  kind: string;
  route: string;
  decision: string;
  reason: string;
  spiffeId?: string;
  certificateSerial?: string;
  certificateSha256?: string;
  certificateNotAfter?: string;
  remoteAddress?: string;
  action?: string;
  target?: string;
}

let admin: RestClient;
const printed: string[] = [];
const secrets: Record<string, string> = {};
const records: Rec[] = [];
let runnerSpiffe = "";
let runnerSerial = "";
let adminSerial = "";
let jobId = "";
let orphanName = "";

const hex = (n: number) => new RegExp(`^[0-9a-f]{${n}}$`);
const loopback = /^(127\.0\.0\.1|::ffff:127\.0\.0\.1)$/;

// What the server prints is captured from before it starts until after it closes.
beforeAll(() => {
  for (const method of ["log", "error", "warn", "info", "debug"] as const) {
    vi.spyOn(console, method).mockImplementation(
      (...args: unknown[]) =>
        void printed.push(
          args
            .map((a) =>
              a instanceof Error
                ? `${a.message}\n${a.stack}`
                : typeof a === "string"
                  ? a
                  : JSON.stringify(a),
            )
            .join(" "),
        ),
    );
  }
});
afterAll(() => {
  vi.restoreAllMocks();
});
const cp = useControlPlane(async () => {
  const pki = await createTestPki();
  return { pki, ...issuerOf(pki) };
});

beforeAll(async () => {
  const adminCert = await cp.pki.service("test-admin");
  adminSerial = adminCert.serialHex;
  admin = createRestClient(cp.url, cp.pki.ca.certPem, adminCert);

  const grant = async (body: Record<string, unknown> = {}) =>
    (
      await admin.request("POST", "/v1/admin/enrollment-grants", {
        apiVersion: "v1",
        workspaceId: "wa",
        ...body,
      })
    ).json;
  // Enroll with a grant, then use it again.
  const g1 = await grant();
  secrets.usedGrant = g1.grant;
  const csr = await makeCsr();
  secrets.runnerKey = csr.keyPem;
  const enrolled = await enrollRequest(cp, { grant: g1.grant, runnerId: "ra", csr: csr.csrPem });
  expect(enrolled.status, enrolled.text).toBe(200);
  runnerSpiffe = enrolled.json.spiffeId;
  expect(
    (await enrollRequest(cp, { grant: g1.grant, runnerId: "rb", csr: (await makeCsr()).csrPem }))
      .status,
  ).toBe(401);
  // An expired grant, a forged CSR.
  const g2 = await grant();
  secrets.expiredGrant = g2.grant;
  await sql`update enrollment_grants set expires_at = now() - interval '1 second' where id = ${g2.grantId}`.execute(
    cp.plane.store.db,
  );
  expect(
    (await enrollRequest(cp, { grant: g2.grant, runnerId: "rc", csr: (await makeCsr()).csrPem }))
      .status,
  ).toBe(401);
  const g3 = await grant();
  secrets.unusedGrant = g3.grant;
  expect(
    (
      await enrollRequest(cp, {
        grant: g3.grant,
        runnerId: "rd",
        csr: (await makeCsr({ forge: true })).csrPem,
      })
    ).status,
  ).toBe(400);

  // The enrolled runner works a job and renews its certificate.
  const runner = createRestClient(cp.url, cp.pki.ca.certPem, {
    certPem: enrolled.json.certificateChain,
    keyPem: csr.keyPem,
  });
  expect(
    (
      await runner.request("POST", "/v1/runner/register", {
        apiVersion: "v1",
        runnerId: "ra",
        workspaceId: "wa",
        slots: 1,
      })
    ).status,
  ).toBe(200);
  jobId = (
    await admin.request("POST", "/v1/admin/jobs", jobBody({ workspaceId: "wa", labels: [] }))
  ).json.job.id;
  const claim = await runner.request("POST", "/v1/runner/claim", {
    apiVersion: "v1",
    runnerId: "ra",
  });
  expect(claim.status, claim.text).toBe(200);
  secrets.leaseToken = claim.json.token;
  const renewCsr = await makeCsr();
  secrets.renewedKey = renewCsr.keyPem;
  expect(
    (
      await runner.request("POST", "/v1/runner/certificate", {
        apiVersion: "v1",
        csr: renewCsr.csrPem,
      })
    ).status,
  ).toBe(200);
  // A runner identity calling an admin method.
  expect(
    (
      await runner.request("POST", "/v1/admin/jobs", {
        apiVersion: "v1",
        workspaceId: "wa",
        spec: { argv: ["true"] },
      })
    ).status,
  ).toBe(403);
  // Cancel, retire, then the retired runner on its open connection.
  expect(
    (await admin.request("POST", `/v1/admin/jobs/${jobId}/cancel`, { apiVersion: "v1" })).status,
  ).toBe(200);
  expect(
    (
      await admin.request("POST", "/v1/admin/runners/ra/retire", {
        apiVersion: "v1",
        workspaceId: "wa",
        reason: "test",
      })
    ).status,
  ).toBe(200);
  expect(
    (
      await runner.request("POST", "/v1/runner/renew", {
        apiVersion: "v1",
        jobId,
        leaseToken: claim.json.token,
      })
    ).status,
  ).toBe(403);
  runnerSerial = new X509Certificate(enrolled.json.certificateChain).serialNumber.toLowerCase();
  await runner.close();
  // A plain runner with a bad body: its lease token must not be echoed anywhere either.
  const other = await runnerActor(cp, "ro", "wa");
  await other.rest.request("POST", "/v1/runner/renew", {
    apiVersion: "v1",
    jobId,
    leaseToken: "secret-looking-token-value-123",
  });
  // An orphan it reports, which the administrator orders reaped.
  expect((await other.register()).status).toBe(200);
  orphanName = networkName(newJobId());
  const inventory = await other.rest.request("POST", "/v1/runner/inventory", {
    apiVersion: "v1",
    runnerId: "ro",
    items: [
      {
        kind: "network",
        name: orphanName,
        jobId: orphanName.slice("forelead-".length),
        state: "created",
        orphan: true,
      },
    ],
  });
  expect(inventory.status, inventory.text).toBe(200);
  const reap = await admin.request("POST", "/v1/admin/reap-orders", {
    apiVersion: "v1",
    runnerId: "ro",
    workspaceId: "wa",
    kind: "network",
    name: orphanName,
  });
  expect(reap.status, reap.text).toBe(200);
  await other.close();

  let pageToken = "";
  do {
    const page = await admin.request(
      "GET",
      `/v1/admin/audit?pageSize=7${pageToken ? `&pageToken=${pageToken}` : ""}`,
    );
    expect(page.status, page.text).toBe(200);
    records.push(...page.json.records);
    pageToken = page.json.nextPageToken ?? "";
  } while (pageToken);
}, 120_000);

afterAll(async () => {
  await admin?.close();
});

const action = (name: string, decision: string) =>
  records.filter((r) => r.kind === "action" && r.action === name && r.decision === decision);

describe(`the audit trail (${databaseKind})`, () => {
  it("pages are newest first and never repeat a record", () => {
    const ids = records.map((r) => Number(r.id));
    expect(new Set(ids).size).toBe(ids.length);
    expect([...ids].sort((a, b) => b - a)).toEqual(ids);
    expect(records.length).toBeGreaterThan(21); // so at least four pages of 7
  });

  it("grant created and used: who, what, with the caller's certificate; the enrolling runner named", () => {
    const created = action("grant.create", "allow");
    expect(created).toHaveLength(3);
    expect(created[0]).toMatchObject({
      route: "POST /v1/admin/enrollment-grants",
      spiffeId: testAdminId,
      certificateSerial: adminSerial,
      remoteAddress: expect.stringMatching(loopback),
    });
    expect(created[0]!.certificateSha256).toMatch(hex(64));
    expect(created[0]!.certificateNotAfter).toBeDefined();
    expect(created[0]!.target).toMatch(
      /^enrollment grant [0-9a-f-]{36} for workspace "wa", any runner id$/,
    );

    const used = action("grant.use", "allow");
    expect(used).toEqual([
      expect.objectContaining({
        route: "POST /v1/enroll",
        spiffeId: runnerSpiffe,
        reason: 'runner "ra" enrolled in workspace "wa"',
        remoteAddress: expect.stringMatching(loopback),
      }),
    ]);
    expect(used[0]!.target).toContain(`created by ${testAdminId}`);
    expect(used[0]!.certificateSerial).toBeUndefined(); // enrollment has no client certificate
  });

  it("refused enrollments: second use, expired grant, forged CSR", () => {
    const refused = action("grant.use", "deny").map((r) => r.reason);
    expect(refused).toEqual(
      expect.arrayContaining([
        expect.stringMatching(
          /^the enrollment grant [0-9a-f-]{36} was already used at .* \(runner "ra"\)/,
        ),
        expect.stringMatching(/^the enrollment grant [0-9a-f-]{36} expired at /),
        "the csr's signature does not verify with its public key; make the request with the key it names",
      ]),
    );
  });

  it("certificates issued on enrollment and on renewal, with serial and lifetime", () => {
    const issued = action("certificate.issue", "allow");
    expect(issued.map((r) => r.reason).sort()).toEqual(
      [expect.stringMatching(/^issued on enrollment with grant /), "issued on renewal"].sort(),
    );
    for (const r of issued) {
      expect(r.spiffeId).toBe(runnerSpiffe);
      expect(r.target).toMatch(
        new RegExp(
          `^certificate [0-9a-f]+ \\(sha256 [0-9a-f]{64}\\) for ${runnerSpiffe}, valid \\S+ to \\S+$`,
        ),
      );
    }
    const renewal = issued.find((r) => r.reason === "issued on renewal")!;
    expect(renewal).toMatchObject({
      route: "POST /v1/runner/certificate",
      certificateSerial: runnerSerial,
    });
  });

  it(
    "a runner identity calling an admin method: a denied decision with its " +
      "SPIFFE ID, serial, fingerprint, notAfter and address",
    () => {
      const denied = records.find(
        (r) => r.kind === "decision" && r.decision === "deny" && r.route === "POST /v1/admin/jobs",
      );
      expect(denied).toMatchObject({
        spiffeId: runnerSpiffe,
        certificateSerial: runnerSerial,
        remoteAddress: expect.stringMatching(loopback),
        reason: expect.stringContaining("can never call admin methods"),
      });
      expect(denied!.certificateSha256).toMatch(hex(64));
      expect(Date.parse(denied!.certificateNotAfter!)).toBeGreaterThan(Date.now());
    },
  );

  it(
    "enqueue, cancel and retire are actions of the admin; the retired " +
      "runner's next request is a denied decision",
    () => {
      expect(action("job.enqueue", "allow")).toEqual([
        expect.objectContaining({
          spiffeId: testAdminId,
          target: `job ${jobId} in workspace "wa"`,
        }),
      ]);
      expect(action("job.cancel", "allow")).toEqual([
        expect.objectContaining({
          spiffeId: testAdminId,
          target: `job ${jobId} in workspace "wa"`,
          reason: `job ${jobId} is running; cancel requested from its runner`,
        }),
      ]);
      expect(action("runner.retire", "allow")).toEqual([
        expect.objectContaining({
          spiffeId: testAdminId,
          route: "POST /v1/admin/runners/ra/retire",
          target: 'runner "ra" in workspace "wa"',
          reason: `retired (test); 1 live lease(s) released to the queue: jobs ${jobId}`,
        }),
      ]);
      const refused = records.find(
        (r) =>
          r.kind === "decision" &&
          r.decision === "deny" &&
          r.route === "POST /v1/runner/renew" &&
          r.spiffeId === runnerSpiffe,
      );
      expect(refused?.reason).toMatch(/^runner "ra" in workspace "wa" was retired at /);
      expect(refused?.certificateSerial).toBe(runnerSerial);
    },
  );

  it("an ordered reap is an action of the admin, naming the order and the item", () => {
    expect(action("reap.order", "allow")).toEqual([
      expect.objectContaining({
        spiffeId: testAdminId,
        certificateSerial: adminSerial,
        route: "POST /v1/admin/reap-orders",
        target: expect.stringMatching(
          new RegExp(`^reap order \\d+: network ${orphanName} of runner "ro" in workspace "wa"$`),
        ),
        reason: expect.stringMatching(/^reap order \d+ is pending$/),
      }),
    ]);
  });

  it("filters by decision, identity, kind and time", async () => {
    const denies = (await admin.request("GET", "/v1/admin/audit?decision=deny&pageSize=1000")).json
      .records as Rec[];
    expect(denies.length).toBe(records.filter((r) => r.decision === "deny").length);
    expect(denies.every((r) => r.decision === "deny")).toBe(true);
    const mine = (
      await admin.request(
        "GET",
        `/v1/admin/audit?spiffeId=${encodeURIComponent(runnerSpiffe)}&kind=action&pageSize=1000`,
      )
    ).json.records as Rec[];
    expect(mine.map((r) => r.action).sort()).toEqual([
      "certificate.issue",
      "certificate.issue",
      "grant.use",
    ]);
    const future = await admin.request(
      "GET",
      `/v1/admin/audit?since=${new Date(Date.now() + 60_000).toISOString()}`,
    );
    expect(future.json.records ?? []).toEqual([]);
    const bad = await admin.request("GET", "/v1/admin/audit?decision=maybe");
    expect(bad.status).toBe(400);
    const badKind = await admin.request("GET", "/v1/admin/audit?kind=routine");
    expect(badKind.status).toBe(400);
    expect(badKind.json.message).toBe(
      `kind must be one of "decision", "action", "notable"; got "routine"`,
    );
  });

  it("kind=notable: the actions and the refusals, none of the routine allows", async () => {
    const notable = (await admin.request("GET", "/v1/admin/audit?kind=notable&pageSize=1000")).json
      .records as Rec[];
    const all = (await admin.request("GET", "/v1/admin/audit?pageSize=1000")).json.records as Rec[];
    // Records written between the two reads are left out: the newest first, so compare by id.
    const newest = Number(notable[0]?.id);
    const expected = all.filter(
      (r) => Number(r.id) <= newest && (r.kind === "action" || r.decision === "deny"),
    );
    expect(notable.map((r) => r.id)).toEqual(expected.map((r) => r.id));
    // The trail holds all three sorts, so the filter left something out and kept both sorts.
    expect(all.some((r) => r.kind === "decision" && r.decision === "allow")).toBe(true);
    expect(notable.some((r) => r.kind === "action")).toBe(true);
    expect(notable.some((r) => r.kind === "decision" && r.decision === "deny")).toBe(true);
  });

  it("no grant, lease token or private key appears in any audit record, grant row or server log line", async () => {
    const rows = await cp.plane.store.db.selectFrom("audit_records").selectAll().execute();
    const grants = await cp.plane.store.db.selectFrom("enrollment_grants").selectAll().execute();
    expect(rows.length).toBeGreaterThanOrEqual(records.length);
    const haystacks = {
      "audit records": JSON.stringify(rows),
      "grant rows": JSON.stringify(grants),
      "server output": printed.join("\n"),
      "audit API": JSON.stringify(records),
    };
    const needles = { ...secrets, otherToken: "secret-looking-token-value-123" };
    for (const [where, text] of Object.entries(haystacks)) {
      for (const [what, secret] of Object.entries(needles)) {
        // a line of the key's base64 body
        const probe = what.endsWith("Key") ? secret.split("\n")[1]! : secret;
        expect(text.includes(probe), `${what} found in ${where}`).toBe(false);
      }
    }
    // The checks above would notice: the grant and token really were handled.
    expect(secrets.usedGrant).toMatch(/^feg_/);
    expect(secrets.leaseToken!.length).toBeGreaterThan(20);
  });
});
