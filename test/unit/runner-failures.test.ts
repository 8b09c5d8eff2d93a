// The runner transport's one classification of failures (failures.ts),
// against a real HTTP/2 TLS server: what no retry cures carries a fix naming
// the flag to change; a refused or dropped connection stays transient.
import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createCertificateAuthority, issueServerCertificate } from "../../src/identity/ca.js";
import { RunnerApiError } from "../../src/runner/transport/client.js";
import { fixOf } from "../../src/runner/transport/failures.js";
import {
  createRestTransport,
  type TlsMaterial,
} from "../../src/runner/transport/rest-transport.js";
import { createTestPki, type TestPki } from "../support/pki.js";

let pki: TestPki;
let server: http2.Http2SecureServer;
let port: number;
const sources = { ca: "--ca /etc/forelead/ca.pem", cert: "--cert /etc/forelead/runner.pem" };

beforeAll(async () => {
  pki = await createTestPki();
  // A certificate for "localhost" only: 127.0.0.1 is the wrong host.
  const localhostOnly = await issueServerCertificate(pki.ca, { hosts: ["localhost"] });
  server = http2.createSecureServer(
    { cert: localhostOnly.certPem, key: localhostOnly.keyPem, minVersion: "TLSv1.3" },
    (_req, res) => res.end("{}"),
  );
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  port = (server.address() as AddressInfo).port;
});
afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

async function failureOf(url: string, ca: string): Promise<Error> {
  const client = await pki.runner("r1", "w1");
  const tls = (): TlsMaterial => ({ ca, cert: client.certPem, key: client.keyPem });
  const transport = createRestTransport(url, tls, { sources });
  try {
    await transport.request("GET", "/v1/runner/clock", undefined, { timeoutMs: 5000 });
    throw new Error("the request succeeded");
  } catch (err) {
    return err as Error;
  } finally {
    await transport.close();
  }
}

describe("runner failures: final or transient", () => {
  it("a CA bundle that did not sign the server's certificate is final, naming the --ca file", async () => {
    const other = await createCertificateAuthority({ commonName: "another CA" });
    const err = await failureOf(`https://localhost:${port}`, other.certPem);
    expect(fixOf(err)).toMatch(
      new RegExp(
        `^cannot verify the control plane at https://localhost:${port}: its ` +
          `certificate is not signed by the CA bundle --ca /etc/forelead/ca.pem ` +
          `\\((UNABLE_TO_VERIFY_LEAF_SIGNATURE|SELF_SIGNED_CERT_IN_CHAIN|UNABLE_TO_GET_ISSUER_CERT_LOCALLY): `,
      ),
    );
  });

  it("a server certificate that does not name the --server host is final, naming the host", async () => {
    const err = await failureOf(`https://127.0.0.1:${port}`, pki.ca.certPem);
    expect(fixOf(err)).toMatch(
      new RegExp(
        `^the control plane's certificate does not name the host "127.0.0.1" of ` +
          `--server https://127.0.0.1:${port} \\(ERR_TLS_CERT_ALTNAME_INVALID: `,
      ),
    );
  });

  it("a refused connection is transient", async () => {
    const closed = http2.createSecureServer({});
    await new Promise<void>((resolve) => closed.listen(0, "127.0.0.1", resolve));
    const freePort = (closed.address() as AddressInfo).port;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    const err = await failureOf(`https://localhost:${freePort}`, pki.ca.certPem);
    expect(err.message).toContain("ECONNREFUSED");
    expect(fixOf(err)).toBeUndefined();
  });

  it("401 and 403 are final, 409 already_exists only on register; 503 and a lease's 409 are not", () => {
    expect(
      fixOf(
        new RunnerApiError(
          "POST /v1/runner/claim",
          401,
          "unauthenticated",
          "the client certificate expired at 2026-12-01T00:00:00Z",
          sources,
        ),
      ),
    ).toBe(
      "the control plane refused this runner's certificate (--cert " +
        "/etc/forelead/runner.pem): the client certificate expired at " +
        "2026-12-01T00:00:00Z; renew or re-enroll it",
    );
    expect(
      fixOf(
        new RunnerApiError(
          "POST /v1/runner/claim",
          403,
          "permission_denied",
          'runner "r1" is retired',
        ),
      ),
    ).toBe('the control plane refuses this runner: runner "r1" is retired');
    expect(
      fixOf(
        new RunnerApiError(
          "POST /v1/runner/register",
          409,
          "already_exists",
          'runner "r1" in workspace "w1" is already running',
        ),
      ),
    ).toBe('runner "r1" in workspace "w1" is already running');
    expect(
      fixOf(new RunnerApiError("POST /v1/runner/renew", 409, "aborted", "lease expired")),
    ).toBeUndefined();
    expect(
      fixOf(
        new RunnerApiError(
          "POST /v1/runner/claim",
          503,
          "unavailable",
          "the database is unreachable",
        ),
      ),
    ).toBeUndefined();
  });
});
