// The identity refusals of docs/design.md "Identity, per request", each driven
// through the real server over HTTP/2 + TLS with a certificate made here.
// After every test a good runner is still served: no refusal may take the
// server down or poison its state.
import "reflect-metadata";
import { X509Certificate, webcrypto } from "node:crypto";
import * as x509 from "@peculiar/x509";
import http2 from "node:http2";
import https from "node:https";
import tls from "node:tls";
import { Code, ConnectError } from "@connectrpc/connect";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { RunnerService } from "../../gen/forelead/runner/v1/runner_pb.js";
import {
  createCertificateAuthority,
  issueClientCertificate,
  type IssuedCertificate,
} from "../../src/identity/ca.js";
import { eventually } from "../support/actors.js";
import {
  createRestClient,
  createTestClient,
  rpcProtocols,
  type RestReply,
  type RpcProtocol,
} from "../support/clients.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";

const HOUR = 3_600_000;
const r1 = "spiffe://forelead/runners/r1/workspaces/w1";
const r2 = "spiffe://forelead/runners/r2/workspaces/w1";
const registration = {
  apiVersion: "v1",
  runnerId: "r1",
  workspaceId: "w1",
  slots: 2,
  cpu: 4,
  memoryBytes: "1073741824",
  architecture: "amd64",
  labels: ["linux"],
};

const cp = useControlPlane();
let good: IssuedCertificate;

beforeAll(async () => {
  good = await cp.pki.runner("r1", "w1");
});

/** One request on a fresh connection with `cert` (none when undefined). */
async function send(
  cert: IssuedCertificate | undefined,
  method: string,
  path: string,
  body?: unknown,
): Promise<RestReply> {
  const client = createRestClient(cp.url, cp.pki.ca.certPem, cert);
  try {
    return await client.request(method, path, body);
  } finally {
    await client.close();
  }
}

/** Asserts a REST refusal: status, Connect code, and message fragments an operator can act on. */
function expectRefusal(
  reply: RestReply,
  status: number,
  code: string,
  ...fragments: string[]
): void {
  expect({ status: reply.status, code: reply.json?.code }, reply.text).toEqual({ status, code });
  expect(reply.headers["content-type"]).toBe("application/json");
  for (const fragment of fragments) expect(reply.json.message).toContain(fragment);
}

async function expectGoodRunnerServed(): Promise<void> {
  const reply = await send(good, "GET", "/v1/runner/clock");
  expect(reply.status, `a good runner is no longer served: ${reply.text}`).toBe(200);
  expect(reply.json.apiVersion).toBe("v1");
}

/**
 * Connects with plain TLS; resolves with the negotiated protocol, rejects with the handshake error.
 */
function tlsHandshake(
  options: tls.ConnectionOptions,
): Promise<{ protocol: string | null; alpn: string | false | null }> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({
      host: "127.0.0.1",
      port: cp.plane.port,
      ca: cp.pki.ca.certPem,
      cert: good.certPem,
      key: good.keyPem,
      ...options,
    });
    socket.once("secureConnect", () => {
      resolve({ protocol: socket.getProtocol(), alpn: socket.alpnProtocol });
      socket.destroy();
    });
    socket.once("error", reject);
  });
}

/** What a generated client's call threw, as a ConnectError (fails when it did not throw). */
async function rpcError(call: () => Promise<unknown>): Promise<ConnectError> {
  try {
    await call();
  } catch (err) {
    return ConnectError.from(err);
  }
  throw new Error("the call succeeded; it should have been refused");
}

/** Reads a reply from a stream opened by hand. */
function readReply(stream: http2.ClientHttp2Stream): Promise<RestReply> {
  return new Promise((resolve, reject) => {
    let headers: http2.IncomingHttpHeaders = {};
    let text = "";
    stream.setEncoding("utf8");
    stream.on("response", (h) => (headers = h));
    stream.on("data", (chunk: string) => (text += chunk));
    stream.on("error", reject);
    stream.on("end", () =>
      resolve({
        status: Number(headers[":status"]),
        headers,
        text,
        json: text ? JSON.parse(text) : undefined,
      }),
    );
  });
}

const fingerprintOf = (cert: IssuedCertificate) =>
  new X509Certificate(cert.certPem).fingerprint256.replaceAll(":", "").toLowerCase();
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));

describe(`identity, per request (${databaseKind})`, () => {
  afterEach(expectGoodRunnerServed);

  describe("the certificate policy refuses with 401 unauthenticated", () => {
    const now = () => Date.now();
    it.each([
      {
        rule: "no client certificate",
        make: async () => undefined,
        message: ["no client certificate was presented"],
      },
      {
        rule: "a certificate from a CA outside the client trust bundle",
        make: async () =>
          issueClientCertificate(await createCertificateAuthority({ commonName: "stranger CA" }), {
            uris: [r1],
          }),
        message: ["not signed by a CA in the control plane's client trust bundle"],
      },
      {
        rule: "an expired certificate",
        make: () =>
          cp.pki.runner("r1", "w1", {
            notBefore: new Date(now() - 2 * HOUR),
            notAfter: new Date(now() - HOUR),
          }),
        message: ["expired at", "renew it"],
      },
      {
        rule: "a certificate not yet valid",
        make: () => cp.pki.runner("r1", "w1", { notBefore: new Date(now() + HOUR) }),
        message: ["not valid before"],
      },
      {
        rule: "a lifetime over the maximum",
        make: () => cp.pki.runner("r1", "w1", { lifetimeMs: 48 * HOUR }),
        message: ["lifetime is 48h", "over the 24h maximum"],
      },
      {
        rule: "a CA certificate as the leaf",
        make: () => cp.pki.runner("r1", "w1", { isCA: true }),
        message: ["is a CA certificate", "cA=true"],
      },
      {
        rule: "two URI SANs",
        make: () => cp.pki.client({ uris: [r1, r2] }),
        message: ["2 URI SANs", "exactly one"],
      },
      {
        rule: "no URI SAN",
        make: () => cp.pki.client({ dnsNames: ["runner.example"] }),
        message: ["0 URI SANs", "exactly one"],
      },
      {
        rule: "a foreign trust domain",
        make: () => cp.pki.client({ uris: ["spiffe://other/runners/r1/workspaces/w1"] }),
        message: ['trust domain "other" is not this control plane\'s ("forelead")'],
      },
      {
        rule: "an uppercase scheme",
        make: () => cp.pki.client({ uris: ["SPIFFE://forelead/runners/r1/workspaces/w1"] }),
        message: ["is not a valid SPIFFE ID", "the scheme must be lowercase"],
      },
      {
        rule: "an uppercase trust domain",
        make: () => cp.pki.client({ uris: ["spiffe://FORELEAD/runners/r1/workspaces/w1"] }),
        message: ["is not a valid SPIFFE ID", "the trust domain must be lowercase"],
      },
      {
        rule: "a dot segment (runners/r2/../r1 must not be read as runner r1)",
        make: () => cp.pki.client({ uris: ["spiffe://forelead/runners/r2/../r1/workspaces/w1"] }),
        message: ["is not a valid SPIFFE ID", "'.' and '..' path segments are not allowed"],
      },
      {
        rule: "a trailing slash",
        make: () => cp.pki.client({ uris: [`${r1}/`] }),
        message: ["is not a valid SPIFFE ID", "a trailing slash is not allowed"],
      },
      {
        rule: "percent-encoding (%72%31 must not be read as r1)",
        make: () => cp.pki.client({ uris: ["spiffe://forelead/runners/%72%31/workspaces/w1"] }),
        message: ["is not a valid SPIFFE ID", "percent-encoding is not allowed"],
      },
    ])("$rule", async ({ make, message }) => {
      const reply = await send(await make(), "GET", "/v1/runner/clock");
      expectRefusal(reply, 401, "unauthenticated", ...message);
    });

    it("one URI SAN whose text looks like two SANs is one invalid ID, not two runners", async () => {
      const cert = await cp.pki.client({ uris: [`${r1}, URI:${r2}`] });
      const reply = await send(cert, "GET", "/v1/runner/clock");
      expectRefusal(
        reply,
        401,
        "unauthenticated",
        "is not a valid SPIFFE ID",
        "a path segment contains ','",
      );
      expect(reply.json.message).not.toContain("URI SANs");
    });
  });

  describe("chains and key usages the policy reads from the certificate itself", () => {
    const alg = { name: "ECDSA", namedCurve: "P-256", hash: "SHA-256" } as const;
    /**
     * A certificate signed by `issuer` (PEM cert and PKCS#8 key) with the given shape; PEM cert and
     * key.
     */
    async function signedBy(
      issuer: IssuedCertificate,
      shape: { name: string; ca: boolean; usages: number; uris?: string[] },
    ): Promise<IssuedCertificate> {
      const issuerCert = new x509.X509Certificate(issuer.certPem);
      const issuerKey = await webcrypto.subtle.importKey(
        "pkcs8",
        Buffer.from(issuer.keyPem.replace(/-----[^-]+-----|\s/g, ""), "base64"),
        alg,
        false,
        ["sign"],
      );
      const keys = (await webcrypto.subtle.generateKey(alg, true, [
        "sign",
        "verify",
      ])) as webcrypto.CryptoKeyPair;
      const cert = await x509.X509CertificateGenerator.create({
        serialNumber: "0a0b0c",
        subject: `CN=${shape.name}`,
        issuer: issuerCert.subject,
        notBefore: new Date(Date.now() - 60_000),
        notAfter: new Date(Date.now() + HOUR),
        publicKey: keys.publicKey,
        signingKey: issuerKey,
        signingAlgorithm: alg,
        extensions: [
          new x509.BasicConstraintsExtension(shape.ca, undefined, true),
          new x509.KeyUsagesExtension(shape.usages, true),
          ...(shape.uris
            ? [
                new x509.SubjectAlternativeNameExtension(
                  shape.uris.map((value) => ({ type: "url" as const, value })),
                ),
              ]
            : []),
          await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
          await x509.AuthorityKeyIdentifierExtension.create(issuerCert.publicKey),
        ],
      });
      const pkcs8 = Buffer.from(
        await webcrypto.subtle.exportKey("pkcs8", keys.privateKey),
      ).toString("base64");
      return {
        certPem: cert.toString("pem"),
        keyPem: `-----BEGIN PRIVATE KEY-----\n${pkcs8}\n-----END PRIVATE KEY-----\n`,
        serialHex: "0a0b0c",
        notBefore: cert.notBefore,
        notAfter: cert.notAfter,
      };
    }

    it("a runner certificate under an intermediate CA the client sends with it is served", async () => {
      const intermediate = await signedBy(cp.pki.ca, {
        name: "forelead intermediate",
        ca: true,
        usages: x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign,
      });
      const leaf = await signedBy(intermediate, {
        name: "r1",
        ca: false,
        usages: x509.KeyUsageFlags.digitalSignature,
        uris: [r1],
      });
      const reply = await send(
        { ...leaf, certPem: `${leaf.certPem}\n${intermediate.certPem}\n` },
        "GET",
        "/v1/runner/clock",
      );
      expect(reply.status, reply.text).toBe(200);
    });

    it("the same leaf without its intermediate is refused as untrusted", async () => {
      const intermediate = await signedBy(cp.pki.ca, {
        name: "forelead intermediate",
        ca: true,
        usages: x509.KeyUsageFlags.keyCertSign,
      });
      const leaf = await signedBy(intermediate, {
        name: "r1",
        ca: false,
        usages: x509.KeyUsageFlags.digitalSignature,
        uris: [r1],
      });
      expectRefusal(
        await send(leaf, "GET", "/v1/runner/clock"),
        401,
        "unauthenticated",
        "not signed by a CA in the control plane's client trust bundle",
      );
    });

    it("a leaf whose key usage allows signing certificates is refused", async () => {
      const leaf = await signedBy(cp.pki.ca, {
        name: "r1",
        ca: false,
        usages: x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyCertSign,
        uris: [r1],
      });
      expectRefusal(
        await send(leaf, "GET", "/v1/runner/clock"),
        401,
        "unauthenticated",
        "key usage allows signing certificates",
      );
    });
  });

  describe("a valid identity of the wrong shape is refused on runner routes with 403", () => {
    it.each(["spiffe://forelead/services/x", "spiffe://forelead/runners/r1", "spiffe://forelead"])(
      "%s",
      async (uri) => {
        const reply = await send(await cp.pki.client({ uris: [uri] }), "GET", "/v1/runner/clock");
        expectRefusal(
          reply,
          403,
          "permission_denied",
          `runner routes need a SPIFFE ID of the form ` +
            `spiffe://forelead/runners/<runner-id>/workspaces/<workspace-id>; this ` +
            `certificate's is ${uri}`,
        );
      },
    );
  });

  describe("the listener speaks only TLS 1.3 and HTTP/2", () => {
    it("a good runner negotiates TLS 1.3 and h2 (the baseline the refusals below differ from)", async () => {
      await expect(tlsHandshake({ ALPNProtocols: ["h2"] })).resolves.toEqual({
        protocol: "TLSv1.3",
        alpn: "h2",
      });
    });

    it("a TLS 1.2 client fails the handshake with a protocol_version alert", async () => {
      const failure = tlsHandshake({ maxVersion: "TLSv1.2", ALPNProtocols: ["h2"] });
      // Alert 70 (protocol_version) from the server, as OpenSSL reports it to Node.
      await expect(failure).rejects.toMatchObject({
        code: "ERR_SSL_TLSV1_ALERT_PROTOCOL_VERSION",
        library: "SSL routines",
      });
    });

    it("an HTTP/1.1-only client fails the handshake with a no_application_protocol alert", async () => {
      const failure = tlsHandshake({ ALPNProtocols: ["http/1.1"] });
      // Alert 120 (no_application_protocol): the server offers only h2.
      await expect(failure).rejects.toMatchObject({
        code: "ERR_SSL_TLSV1_ALERT_NO_APPLICATION_PROTOCOL",
        library: "SSL routines",
      });
    });

    it("an HTTPS/1.1 request without ALPN is never served by a handler", async () => {
      const outcome = await new Promise<{ status?: number; body?: string; error?: string }>(
        (resolve) => {
          const agent = new https.Agent({ keepAlive: false });
          const req = https.get(
            {
              host: "127.0.0.1",
              port: cp.plane.port,
              path: "/v1/runner/clock",
              ca: cp.pki.ca.certPem,
              cert: good.certPem,
              key: good.keyPem,
              agent,
            },
            (res) => {
              let body = "";
              res.setEncoding("utf8");
              res.on("data", (c: string) => (body += c));
              res.on("end", () => {
                resolve({ status: res.statusCode!, body });
                req.destroy();
              });
              res.on("error", (err) => resolve({ error: err.message }));
            },
          );
          req.on("error", (err) => resolve({ error: err.message }));
        },
      );
      // TLS has no alert for a client that offers no ALPN, so the handshake completes; Node's
      // HTTP/2 server then answers "HTTP/1.0 403" itself (allowHTTP1 is false) and no handler runs.
      // Served as HTTP/1.1, this would be a 200 carrying apiVersion.
      expect(outcome.status ?? 0).not.toBe(200);
      expect(outcome.body ?? "").not.toContain("apiVersion");
    });
  });

  describe("the request body is held to the certificate and the contract", () => {
    it.each([
      {
        rule: "apiVersion v2",
        body: { ...registration, apiVersion: "v2" },
        message: ['apiVersion "v2" is not supported', 'speaks "v1"'],
      },
      {
        rule: "a missing apiVersion",
        body: { ...registration, apiVersion: undefined },
        message: ["apiVersion is required"],
      },
      {
        rule: "malformed JSON",
        body: '{"apiVersion": "v1",',
        message: ["the request body is not valid JSON"],
      },
      {
        rule: "a JSON array body",
        body: "[]",
        message: ["the request body must be a JSON object"],
      },
      {
        rule: "slots of the wrong type",
        body: { ...registration, slots: "many" },
        message: ['field "slots"'],
      },
      {
        rule: "slots 0",
        body: { ...registration, slots: 0 },
        message: ["slots must be between 1 and 1024"],
      },
      {
        rule: "labels that are not strings",
        body: { ...registration, labels: [1, {}] },
        message: ['field "labels"'],
      },
    ])("$rule is 400 invalid_argument", async ({ body, message }) => {
      const reply = await send(good, "POST", "/v1/runner/register", body);
      expectRefusal(reply, 400, "invalid_argument", ...message);
    });

    it("runnerId of another runner is 403, naming both runners", async () => {
      const reply = await send(good, "POST", "/v1/runner/register", {
        ...registration,
        runnerId: "r2",
      });
      expectRefusal(
        reply,
        403,
        "permission_denied",
        `runnerId "r2" does not match the certificate's runner "r1"`,
      );
    });

    it("workspaceId of another workspace is 403, naming both workspaces", async () => {
      const reply = await send(good, "POST", "/v1/runner/register", {
        ...registration,
        workspaceId: "w2",
      });
      expectRefusal(
        reply,
        403,
        "permission_denied",
        `workspaceId "w2" does not match the certificate's workspace "w1"`,
      );
    });

    it(
      "a body over 1 MiB is 413 resource_exhausted, and the unread rest of it " +
        "is reset, not left hanging",
      async () => {
        const labels = Array.from({ length: 120_000 }, (_, i) => `label-${i}`);
        const body = JSON.stringify({ ...registration, labels });
        expect(body.length).toBeGreaterThan(1.2e6);
        const client = createRestClient(cp.url, cp.pki.ca.certPem, good);
        const stream = client.session.request({
          ":method": "POST",
          ":path": "/v1/runner/register",
          "content-type": "application/json",
        });
        try {
          const reply = readReply(stream);
          stream.end(body);
          expectRefusal(
            await reply,
            413,
            "resource_exhausted",
            "over 1048576 bytes",
            "send a smaller body",
          );
          // RFC 9113 section 8.1: a reply sent before the whole request is followed by
          // RST_STREAM NO_ERROR, so the client stops sending instead of the stream staying open.
          await eventually(
            "the server to reset the stream whose body it stopped reading",
            async () => stream.closed || undefined,
            5_000,
            10,
          );
          expect(stream.rstCode).toBe(http2.constants.NGHTTP2_NO_ERROR);
          const after = await client.request("GET", "/v1/runner/clock");
          expect(after.status, "the same connection still serves").toBe(200);
        } finally {
          // Node's client keeps a reset stream with unsent data until it is destroyed
          stream.destroy();
          await client.close();
        }
      },
    );

    it("a body just under 1 MiB is read, then judged on its fields", async () => {
      const body = JSON.stringify({ ...registration, padding: "x".repeat(1024 * 1024 - 300) });
      expect(body.length).toBeLessThan(1024 * 1024);
      const reply = await send(good, "POST", "/v1/runner/register", body);
      expect(reply.status, reply.text).toBe(200);
    });
  });

  describe.each<RpcProtocol>(["connect-json", "grpc"])(
    "the same refusals through a generated %s client",
    (protocol) => {
      it("runnerId of another runner is PermissionDenied", async () => {
        const client = createTestClient(RunnerService, cp.url, cp.pki.ca.certPem, good, protocol);
        const err = await rpcError(() =>
          client.register({ ...registration, memoryBytes: 1n << 30n, runnerId: "r2" }),
        );
        expect(err.code).toBe(Code.PermissionDenied);
        expect(err.rawMessage).toBe(`runnerId "r2" does not match the certificate's runner "r1"`);
      });

      it("an expired certificate is Unauthenticated", async () => {
        const expired = await cp.pki.runner("r1", "w1", {
          notBefore: new Date(Date.now() - 2 * HOUR),
          notAfter: new Date(Date.now() - HOUR),
        });
        const client = createTestClient(
          RunnerService,
          cp.url,
          cp.pki.ca.certPem,
          expired,
          protocol,
        );
        const err = await rpcError(() => client.clock({}));
        expect(err.code).toBe(Code.Unauthenticated);
        expect(err.rawMessage).toContain("the client certificate expired at");
      });

      it("apiVersion v2 is InvalidArgument", async () => {
        const client = createTestClient(RunnerService, cp.url, cp.pki.ca.certPem, good, protocol);
        const err = await rpcError(() =>
          client.register({ ...registration, memoryBytes: 1n << 30n, apiVersion: "v2" }),
        );
        expect(err.code).toBe(Code.InvalidArgument);
        expect(err.rawMessage).toContain('apiVersion "v2" is not supported');
      });
    },
  );

  it("a certificate that expires during an HTTP/2 connection is refused on that same connection", async () => {
    const cert = await cp.pki.runner("r1", "w1", {
      notBefore: new Date(Date.now() - 1000),
      notAfter: new Date(Date.now() + 3000),
    });
    const client = createRestClient(cp.url, cp.pki.ca.certPem, cert);
    const session = client.session;
    let goaway = false;
    session.once("goaway", () => (goaway = true));
    try {
      const before = await client.request("GET", "/v1/runner/clock");
      expect(before.status, before.text).toBe(200);

      // Waits for a real certificate's notAfter to pass; nothing here measures time.
      await sleep(cert.notAfter.getTime() - Date.now() + 1100);
      const after = await client.request("GET", "/v1/runner/clock");
      expectRefusal(
        after,
        401,
        "unauthenticated",
        `the client certificate expired at ${cert.notAfter.toISOString()}`,
      );

      expect(client.session).toBe(session);
      expect({ destroyed: session.destroyed, closed: session.closed, goaway }).toEqual({
        destroyed: false,
        closed: false,
        goaway: false,
      });
    } finally {
      await client.close();
    }
  });

  it(
    "an allowed and a refused request are audited with the certificate's " +
      "serial and fingerprint, never the body",
    async () => {
      const marker = "audit-must-not-see-this";
      const expired = await cp.pki.runner("r1", "w1", {
        notBefore: new Date(Date.now() - 2 * HOUR),
        notAfter: new Date(Date.now() - HOUR),
      });
      const allowed = await cp.pki.runner("r1", "w1");
      // The marker rides in a field no audit record describes (a register that changes labels or
      // slots is audited old → new).
      const body = { ...registration, os: marker };
      expectRefusal(
        await send(expired, "POST", "/v1/runner/register", body),
        401,
        "unauthenticated",
        "expired",
      );
      expect((await send(allowed, "POST", "/v1/runner/register", body)).status).toBe(200);

      await cp.plane.audit.flush();
      const rows = await cp.plane.store.db.selectFrom("audit_records").selectAll().execute();
      const deny = rows.filter((r) => r.certificate_serial === expired.serialHex);
      const allow = rows.filter((r) => r.certificate_serial === allowed.serialHex);
      expect(deny).toHaveLength(1);
      expect(allow).toHaveLength(1);
      expect(deny[0]).toMatchObject({
        decision: "deny",
        route: "POST /v1/runner/register",
        spiffe_id: r1,
        certificate_sha256: fingerprintOf(expired),
        remote_address: "127.0.0.1",
      });
      expect(deny[0]!.reason).toContain(
        `the client certificate expired at ${expired.notAfter.toISOString()}`,
      );
      expect(new Date(deny[0]!.certificate_not_after!).getTime()).toBe(expired.notAfter.getTime());
      expect(allow[0]).toMatchObject({
        decision: "allow",
        route: "POST /v1/runner/register",
        spiffe_id: r1,
        certificate_sha256: fingerprintOf(allowed),
        reason: `runner ${r1}`,
      });
      expect(new Date(allow[0]!.certificate_not_after!).getTime()).toBe(allowed.notAfter.getTime());

      for (const row of rows) {
        const text = JSON.stringify(row);
        expect(text).not.toContain(marker);
        expect(text).not.toContain("apiVersion");
        expect(text).not.toContain("BEGIN");
      }
    },
  );
});

describe(`identity comes before the body (${databaseKind})`, () => {
  it("a request without a certificate is refused 401 before its body is parsed, and is audited", async () => {
    const malformed = await send(undefined, "POST", "/v1/runner/register", "{not json");
    expectRefusal(malformed, 401, "unauthenticated", "no client certificate");
    const unknownField = await send(undefined, "POST", "/v1/runner/register", {
      apiVersion: "v1",
      slots: "many",
    });
    expectRefusal(unknownField, 401, "unauthenticated");
    await cp.plane.audit.flush();
    const denied = await cp.plane.store.db
      .selectFrom("audit_records")
      .selectAll()
      .where("route", "=", "POST /v1/runner/register")
      .where("decision", "=", "deny")
      .where("reason", "like", "no client certificate%")
      .execute();
    expect(denied.length).toBeGreaterThanOrEqual(2);
  });

  const connectRegister = "POST /forelead.runner.v1.RunnerService/Register";
  const auditRows = async (serial: string | undefined, route: string) => {
    await cp.plane.audit.flush();
    // The identity decisions only: a register that changes a live runner's slots or labels adds an
    // action record of its own.
    const rows = await cp.plane.store.db
      .selectFrom("audit_records")
      .selectAll()
      .where("route", "=", route)
      .where("kind", "=", "decision")
      .execute();
    return serial === undefined ? rows : rows.filter((r) => r.certificate_serial === serial);
  };

  it(
    "Connect: a request without a certificate and with a malformed body is " +
      "audited as refused before the body is parsed",
    async () => {
      const before = (await auditRows(undefined, connectRegister)).filter(
        (r) => r.decision === "deny" && r.reason.startsWith("no client certificate"),
      ).length;
      const reply = await send(
        undefined,
        "POST",
        "/forelead.runner.v1.RunnerService/Register",
        "{not json",
      );
      // Connect answers its own parse error; the identity was decided first
      expect(reply.status).toBeGreaterThanOrEqual(400);
      const after = (await auditRows(undefined, connectRegister)).filter(
        (r) => r.decision === "deny" && r.reason.startsWith("no client certificate"),
      ).length;
      expect(after).toBe(before + 1);
    },
  );

  it.each(rpcProtocols)(
    "%s: a refused and an allowed call are each decided and audited once",
    async (protocol) => {
      const expired = await cp.pki.runner("r1", "w1", {
        notBefore: new Date(Date.now() - 2 * HOUR),
        notAfter: new Date(Date.now() - HOUR),
      });
      const err = await rpcError(() =>
        createTestClient(RunnerService, cp.url, cp.pki.ca.certPem, expired, protocol).register({
          ...registration,
          memoryBytes: 1n << 30n,
        }),
      );
      expect(err.code).toBe(Code.Unauthenticated);
      expect(err.rawMessage).toContain("expired");
      const denied = await auditRows(expired.serialHex, connectRegister);
      expect(denied.map((r) => r.decision)).toEqual(["deny"]);

      const allowed = await cp.pki.runner("r1", "w1");
      await createTestClient(RunnerService, cp.url, cp.pki.ca.certPem, allowed, protocol).register({
        ...registration,
        memoryBytes: 1n << 30n,
      });
      const admitted = await auditRows(allowed.serialHex, connectRegister);
      expect(admitted.map((r) => [r.decision, r.reason])).toEqual([["allow", `runner ${r1}`]]);
    },
  );
});
