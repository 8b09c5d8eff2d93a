// Certificate rotation without a restart: the control plane serves the TLS
// files it was started from, re-reads them when they change, and keeps what
// it serves when a replacement is bad.
import { X509Certificate } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { once } from "node:events";
import { connect } from "node:tls";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { issueClientCertificate, issueServerCertificate } from "../../src/identity/ca.js";
import { writeFileAtomic } from "../../src/identity/pki-files.js";
import { eventually } from "../support/actors.js";
import { createRestClient, type RestClient } from "../support/clients.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";
import { createTestPki, type TestPki } from "../support/pki.js";

let dir: string;
let pki: TestPki;
const files = () => ({
  cert: join(dir, "server.pem"),
  key: join(dir, "server-key.pem"),
  clientCa: join(dir, "ca.pem"),
});

const cp = useControlPlane(async () => {
  dir = await mkdtemp(join(tmpdir(), "forelead-tls-"));
  pki = await createTestPki();
  await writeFileAtomic(files().cert, pki.server.certPem, 0o644);
  await writeFileAtomic(files().key, pki.server.keyPem, 0o600);
  await writeFileAtomic(files().clientCa, pki.ca.certPem, 0o644);
  return { pki, tlsFiles: files() };
});
let open: RestClient;

beforeAll(async () => {
  open = createRestClient(cp.url, pki.ca.certPem, await pki.runner("r1", "w1"));
  expect((await open.request("GET", "/v1/runner/clock")).status).toBe(200);
});
afterAll(async () => {
  await open?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** The serial of the certificate a new TLS connection is served. */
function servedSerial(): Promise<string> {
  const { port } = new URL(cp.url);
  return new Promise((resolve, reject) => {
    const socket = connect(
      {
        host: "127.0.0.1",
        port: Number(port),
        ca: pki.ca.certPem,
        ALPNProtocols: ["h2"],
        servername: "localhost",
      },
      () => {
        resolve(socket.getPeerX509Certificate()!.serialNumber);
        socket.destroy();
      },
    );
    socket.once("error", reject);
  });
}
const serialOf = (pem: string) => new X509Certificate(pem).serialNumber;

describe(`TLS material reloads without a restart (${databaseKind})`, () => {
  it(
    "a server certificate replaced on disk is served to new connections " +
      "while an open connection goes on with the old one",
    async () => {
      expect(await servedSerial()).toBe(serialOf(pki.server.certPem));
      const next = await issueServerCertificate(pki.ca, { hosts: ["127.0.0.1", "localhost"] });
      await writeFileAtomic(files().key, next.keyPem, 0o600);
      await writeFileAtomic(files().cert, next.certPem, 0o644);
      // The watcher reloads within its debounce; polling the served serial is the observation.
      await eventually(
        "the new certificate to be served",
        async () => ((await servedSerial()) === serialOf(next.certPem) ? true : undefined),
        10_000,
      );
      expect(cp.plane.tls.certificate.serialNumber).toBe(serialOf(next.certPem));
      const socket = open.session.socket as unknown as {
        getPeerX509Certificate(): X509Certificate;
      };
      expect(socket.getPeerX509Certificate().serialNumber).toBe(serialOf(pki.server.certPem));
      expect((await open.request("GET", "/v1/runner/clock")).status).toBe(200);
      expect(cp.plane.tls.failedReloads).toBe(0);
    },
  );

  it(
    "a replacement that cannot be used (a key of another certificate, an " +
      "expired certificate, a missing file) is refused and counted; the old " +
      "one is kept",
    async () => {
      const served = cp.plane.tls.certificate.serialNumber;
      const other = await issueServerCertificate(pki.ca, { hosts: ["localhost"] });
      // the certificate on disk stays: they no longer match
      await writeFileAtomic(files().key, other.keyPem, 0o600);
      expect(await cp.plane.tls.reload("test")).toBe("refused");
      const expired = await issueClientCertificate(pki.ca, {
        dnsNames: ["localhost"],
        notBefore: new Date(Date.now() - 7_200_000),
        notAfter: new Date(Date.now() - 3_600_000),
      });
      await writeFileAtomic(files().cert, expired.certPem, 0o644);
      await writeFileAtomic(files().key, expired.keyPem, 0o600);
      expect(await cp.plane.tls.reload("test")).toBe("refused");
      await rm(files().clientCa);
      expect(await cp.plane.tls.reload("test")).toBe("refused");
      // the watcher may have tried the same files too
      expect(cp.plane.tls.failedReloads).toBeGreaterThanOrEqual(3);
      expect(await servedSerial()).toBe(served);
      const fresh = createRestClient(cp.url, pki.ca.certPem, await pki.runner("r2", "w1"));
      expect((await fresh.request("GET", "/v1/runner/clock")).status).toBe(200);
      await fresh.close();
      expect((await open.request("GET", "/v1/runner/clock")).status).toBe(200);
    },
  );

  it(
    "a CA dropped from the client bundle refuses a connection made before " +
      "the reload at its first request after it, and new connections",
    async () => {
      const other = await createTestPki();
      {
        // Usable files again (the test before left an expired certificate and no bundle), the bundle
        // with a second CA.
        await writeFileAtomic(files().key, pki.server.keyPem, 0o600);
        await writeFileAtomic(files().cert, pki.server.certPem, 0o644);
        await writeFileAtomic(files().clientCa, pki.ca.certPem + other.ca.certPem, 0o644);
        await eventually(
          "the bundle of two CAs to be in force",
          async () => (cp.plane.tls.trustAnchors.length === 2 ? true : undefined),
          10_000,
        );
        const early = createRestClient(cp.url, pki.ca.certPem, await other.runner("r9", "w1"));
        try {
          // The server's SETTINGS come once it has taken the session: its handshake is done, no
          // request sent yet.
          await once(early.session, "remoteSettings");
          await writeFileAtomic(files().clientCa, pki.ca.certPem, 0o644);
          await eventually(
            "the bundle of one CA to be in force",
            async () => (cp.plane.tls.trustAnchors.length === 1 ? true : undefined),
            10_000,
          );
          const refused = await early.request("GET", "/v1/runner/clock");
          expect(refused.status).toBe(401);
          expect(refused.text).toContain(
            "not signed by a CA in the control plane's client trust bundle",
          );
        } finally {
          await early.close();
        }
        const later = createRestClient(cp.url, pki.ca.certPem, await other.runner("r9", "w1"));
        try {
          expect((await later.request("GET", "/v1/runner/clock")).status).toBe(401);
        } finally {
          await later.close();
        }
        const kept = createRestClient(cp.url, pki.ca.certPem, await pki.runner("r2", "w1"));
        try {
          expect((await kept.request("GET", "/v1/runner/clock")).status).toBe(200);
        } finally {
          await kept.close();
        }
      }
    },
  );
});
