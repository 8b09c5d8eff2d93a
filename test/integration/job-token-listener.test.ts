// The job-token discovery listener is a listener like the main one (issue 47): it keeps the
// main listener's connection limits, and the TLS material's one reload path reaches it.
import { X509Certificate } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect } from "node:tls";
import { afterAll, describe, expect, it } from "vitest";
import { issueServerCertificate } from "../../src/identity/ca.js";
import { writeFileAtomic } from "../../src/identity/pki-files.js";
import { eventually } from "../support/actors.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";
import { httpsGet } from "../support/https-get.js";
import { createTestPki, type TestPki } from "../support/pki.js";

const dir = await mkdtemp(join(tmpdir(), "forelead-job-token-listener-"));
const files = {
  cert: join(dir, "server.pem"),
  key: join(dir, "server-key.pem"),
  clientCa: join(dir, "ca.pem"),
};
let pki: TestPki;
/** SIGHUP handlers in the process before the control plane started. */
let sighupBefore = 0;

const cp = useControlPlane(async () => {
  pki = await createTestPki();
  await writeFileAtomic(files.cert, pki.server.certPem, 0o644);
  await writeFileAtomic(files.key, pki.server.keyPem, 0o600);
  await writeFileAtomic(files.clientCa, pki.ca.certPem, 0o644);
  sighupBefore = process.listenerCount("SIGHUP");
  return {
    pki,
    tlsFiles: files,
    connectionLimits: { handshakeTimeoutMs: 1_000, maxConnectionsPerAddress: 4 },
    jobTokens: { keyFile: join(dir, "keys.json"), listen: { host: "127.0.0.1", port: 0 } },
  };
});
afterAll(() => rm(dir, { recursive: true, force: true }));

const discovery = () => new URL(cp.plane.jobTokens!.discoveryUrl!);
const counters = () => cp.plane.jobTokens!.discoveryConnections!;

/** The serial of the certificate a new TLS connection to the discovery listener is served. */
function servedSerial(): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(
      {
        host: "127.0.0.1",
        port: Number(discovery().port),
        ca: pki.ca.certPem,
        ALPNProtocols: ["http/1.1"],
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

describe(`the job-token discovery listener (${databaseKind})`, () => {
  it("a TLS handshake dripped a byte at a time is closed at the handshake bound and counted", async () => {
    const before = counters().handshakeTimeouts;
    const socket = net.connect(Number(discovery().port), "127.0.0.1");
    socket.on("error", () => {});
    const hello = Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03]);
    let i = 0;
    const drip = setInterval(() => i < hello.length && socket.write(hello.subarray(i, ++i)), 200);
    // Without the bound Node waits 120 s; the test's own timeout would end it first.
    await new Promise<void>((resolve) => socket.once("close", () => resolve()));
    clearInterval(drip);
    expect(counters().handshakeTimeouts).toBe(before + 1);
  });

  it("connections past the per-address cap are refused at accept and counted", async () => {
    const port = Number(discovery().port);
    const held = Array.from({ length: 4 }, () =>
      net.connect(port, "127.0.0.1").on("error", () => {}),
    );
    try {
      await Promise.all(held.map((s) => new Promise((r) => s.once("connect", r))));
      const before = counters().refusedConnections;
      const extra = net.connect(port, "127.0.0.1").on("error", () => {});
      await new Promise<void>((resolve) => extra.once("close", () => resolve()));
      expect(counters().refusedConnections).toBe(before + 1);
    } finally {
      held.forEach((s) => s.destroy());
    }
    await eventually("the held connections to be released", async () => {
      const reply = await httpsGet(
        `${cp.plane.jobTokens!.issuerUrl}/.well-known/jwks.json`,
        pki.ca.certPem,
      ).catch(() => undefined);
      return reply?.status === 200 ? true : undefined;
    });
  });

  it("one SIGHUP handler serves both listeners, and a reloaded certificate reaches discovery", async () => {
    expect(process.listenerCount("SIGHUP") - sighupBefore).toBe(1);
    expect(await servedSerial()).toBe(new X509Certificate(pki.server.certPem).serialNumber);
    const next = await issueServerCertificate(pki.ca, { hosts: ["127.0.0.1", "localhost"] });
    await writeFileAtomic(files.key, next.keyPem, 0o600);
    await writeFileAtomic(files.cert, next.certPem, 0o644);
    const serial = new X509Certificate(next.certPem).serialNumber;
    await eventually(
      "the discovery listener to serve the new certificate",
      async () => ((await servedSerial()) === serial ? true : undefined),
      10_000,
    );
    expect(cp.plane.tls.failedReloads).toBe(0);
    const reply = await httpsGet(
      `${cp.plane.jobTokens!.issuerUrl}/.well-known/openid-configuration`,
      pki.ca.certPem,
    );
    expect(reply.status, reply.body).toBe(200);
  });
});
