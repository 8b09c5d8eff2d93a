// The PKI is checked by parsing its output back with two independent parsers
// (@peculiar/x509 and Node/OpenSSL) and by a real mutual-TLS handshake.
import "reflect-metadata";
import { once } from "node:events";
import * as nodeCrypto from "node:crypto";
import { mkdtemp, readFile, readdir, rm, stat, unlink } from "node:fs/promises";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as tls from "node:tls";
import * as x509 from "@peculiar/x509";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  createCertificateAuthority,
  issueClientCertificate,
  issueServerCertificate,
  parseDuration,
  type IssuedCertificate,
} from "../../src/identity/ca.js";
import {
  devPkiPaths,
  initDevPki,
  loadCertificateAuthority,
  writeIssued,
} from "../../src/identity/pki-files.js";

const HOUR = 3_600_000;
const DAY = 24 * HOUR;
const SPIFFE_R1 = "spiffe://forelead/runners/r1/workspaces/w1";
const ODD_URI = `${SPIFFE_R1}, URI:spiffe://forelead/runners/r2/workspaces/w1`;

let ca: IssuedCertificate;
let caNode: nodeCrypto.X509Certificate;
let scratch: string;

beforeAll(async () => {
  ca = await createCertificateAuthority();
  caNode = new nodeCrypto.X509Certificate(ca.certPem);
  scratch = await mkdtemp(join(tmpdir(), "forelead-pki-test-"));
});
afterAll(async () => {
  await rm(scratch, { recursive: true, force: true });
});

function parse(pem: string): x509.X509Certificate {
  return new x509.X509Certificate(pem);
}
function ext<T extends x509.Extension>(pem: string, type: new (raw: ArrayBuffer) => T): T {
  const found = parse(pem).getExtension(type);
  if (found === null) throw new Error(`certificate has no ${type.name}`);
  return found;
}
function sans(pem: string): { type: string; value: string }[] {
  const san = parse(pem).getExtension(x509.SubjectAlternativeNameExtension);
  return san === null ? [] : san.names.items.map((n) => ({ type: n.type, value: n.value }));
}
function caSkiOf(pem: string): string {
  return ext(pem, x509.SubjectKeyIdentifierExtension).keyId;
}
function lifetimeMs(issued: IssuedCertificate): number {
  return issued.notAfter.getTime() - issued.notBefore.getTime();
}

describe("createCertificateAuthority", () => {
  it("makes a self-signed P-256 CA with critical cA=true and keyCertSign|cRLSign", async () => {
    const bc = ext(ca.certPem, x509.BasicConstraintsExtension);
    expect([bc.ca, bc.critical]).toEqual([true, true]);
    const ku = ext(ca.certPem, x509.KeyUsagesExtension);
    expect([ku.usages, ku.critical]).toEqual([
      x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign,
      true,
    ]);
    expect(caSkiOf(ca.certPem)).toMatch(/^[0-9a-f]{40}$/);
    expect(parse(ca.certPem).signatureAlgorithm).toMatchObject({
      name: "ECDSA",
      hash: { name: "SHA-256" },
    });
    expect(caNode.ca).toBe(true);
    expect(caNode.subject).toBe("CN=Forelead Development CA");
    expect(caNode.verify(caNode.publicKey)).toBe(true);
    expect(caNode.publicKey.asymmetricKeyDetails?.namedCurve).toBe("prime256v1");
    expect(ca.keyPem.startsWith("-----BEGIN PRIVATE KEY-----\n")).toBe(true);
    expect(caNode.checkPrivateKey(nodeCrypto.createPrivateKey(ca.keyPem))).toBe(true);
    expect(ca.serialHex).toBe(caNode.serialNumber.toLowerCase());
    expect(lifetimeMs(ca)).toBeGreaterThanOrEqual(3650 * DAY);
    expect(lifetimeMs(ca)).toBeLessThanOrEqual(3653 * DAY);
  });

  it("honours commonName and an explicit validity window", async () => {
    const notBefore = new Date("2030-01-02T03:04:05Z");
    const notAfter = new Date("2031-01-02T03:04:05Z");
    const custom = await createCertificateAuthority({
      commonName: "Test Root",
      notBefore,
      notAfter,
    });
    const node = new nodeCrypto.X509Certificate(custom.certPem);
    expect(node.subject).toBe("CN=Test Root");
    expect([custom.notBefore, custom.notAfter]).toEqual([notBefore, notAfter]);
    expect([parse(custom.certPem).notBefore, parse(custom.certPem).notAfter]).toEqual([
      notBefore,
      notAfter,
    ]);
    expect(new Date(node.validTo)).toEqual(notAfter);
  });
});

describe("issueServerCertificate", () => {
  it("issues a serverAuth leaf with DNS and IP SANs that verifies against the CA", async () => {
    const server = await issueServerCertificate(ca, { hosts: ["localhost", "127.0.0.1", "::1"] });
    const node = new nodeCrypto.X509Certificate(server.certPem);
    expect(node.verify(caNode.publicKey)).toBe(true);
    expect(node.checkIssued(caNode)).toBe(true);
    expect(node.ca).toBe(false);
    expect(ext(server.certPem, x509.BasicConstraintsExtension).ca).toBe(false);
    expect(ext(server.certPem, x509.ExtendedKeyUsageExtension).usages).toEqual([
      x509.ExtendedKeyUsage.serverAuth,
    ]);
    expect(ext(server.certPem, x509.AuthorityKeyIdentifierExtension).keyId).toBe(
      caSkiOf(ca.certPem),
    );
    expect(sans(server.certPem)).toEqual([
      { type: "dns", value: "localhost" },
      { type: "ip", value: "127.0.0.1" },
      { type: "ip", value: "::1" },
    ]);
    expect(node.checkHost("localhost")).toBe("localhost");
    expect(node.checkIP("127.0.0.1")).toBe("127.0.0.1");
    expect(node.checkIP("::1")).toBe("::1");
    expect(node.checkIP("127.0.0.2")).toBeUndefined();
    expect(node.checkPrivateKey(nodeCrypto.createPrivateKey(server.keyPem))).toBe(true);
    expect(lifetimeMs(server)).toBe(365 * DAY);
  });

  it("accepts bracketed and IPv4-mapped IPv6, honours lifetimeMs, refuses no hosts", async () => {
    const server = await issueServerCertificate(ca, {
      hosts: ["[::1]", "::ffff:127.0.0.1"],
      lifetimeMs: HOUR,
    });
    expect(sans(server.certPem)).toEqual([
      { type: "ip", value: "::1" },
      { type: "ip", value: "::ffff:7f00:1" },
    ]);
    expect(lifetimeMs(server)).toBe(HOUR);
    await expect(issueServerCertificate(ca, { hosts: [] })).rejects.toThrow(/at least one host/);
    await expect(issueServerCertificate(ca, { hosts: ["fe80::1%eth0"] })).rejects.toThrow(/zone/);
  });
});

describe("issueClientCertificate", () => {
  it("writes each URI as exactly one URI SAN, even one containing a comma", async () => {
    const cert = await issueClientCertificate(ca, { uris: [ODD_URI] });
    expect(sans(cert.certPem)).toEqual([{ type: "url", value: ODD_URI }]);
    expect(parse(cert.certPem).subjectName.getField("CN")).toEqual([ODD_URI]);

    const several = await issueClientCertificate(ca, {
      uris: [SPIFFE_R1, "spiffe://x/y"],
      dnsNames: ["runner.local"],
    });
    expect(sans(several.certPem)).toEqual([
      { type: "url", value: SPIFFE_R1 },
      { type: "url", value: "spiffe://x/y" },
      { type: "dns", value: "runner.local" },
    ]);
  });

  it("defaults to a clientAuth, cA=false, digitalSignature P-256 leaf within 24 h", async () => {
    const before = Date.now();
    const cert = await issueClientCertificate(ca, { uris: [SPIFFE_R1] });
    const node = new nodeCrypto.X509Certificate(cert.certPem);
    expect(node.verify(caNode.publicKey)).toBe(true);
    expect(node.ca).toBe(false);
    const bc = ext(cert.certPem, x509.BasicConstraintsExtension);
    expect([bc.ca, bc.critical]).toEqual([false, true]);
    const ku = ext(cert.certPem, x509.KeyUsagesExtension);
    expect([ku.usages, ku.critical]).toEqual([x509.KeyUsageFlags.digitalSignature, true]);
    expect(ext(cert.certPem, x509.ExtendedKeyUsageExtension).usages).toEqual([
      x509.ExtendedKeyUsage.clientAuth,
    ]);
    expect(node.keyUsage).toEqual(["1.3.6.1.5.5.7.3.2"]);
    expect(node.publicKey.asymmetricKeyDetails?.namedCurve).toBe("prime256v1");
    expect(node.checkPrivateKey(nodeCrypto.createPrivateKey(cert.keyPem))).toBe(true);
    expect(node.subject).toBe(`CN=${SPIFFE_R1}`);
    // Backdated by the 60 s skew allowance, and the whole lifetime fits a 24 h policy.
    expect(cert.notBefore.getTime()).toBeLessThanOrEqual(before - 59_000);
    expect(cert.notBefore.getTime()).toBeGreaterThanOrEqual(before - 61_000);
    expect(lifetimeMs(cert)).toBeLessThanOrEqual(DAY);
    expect(lifetimeMs(cert)).toBe(DAY - 2 * 60_000);
    expect(new Date(node.validFrom)).toEqual(cert.notBefore);
    expect(new Date(node.validTo)).toEqual(cert.notAfter);
  });

  it("uses random, positive, full 128-bit serials", async () => {
    const a = await issueClientCertificate(ca, {});
    const b = await issueClientCertificate(ca, {});
    for (const cert of [a, b]) {
      expect(cert.serialHex).toMatch(/^[0-9a-f]{32}$/);
      expect(cert.serialHex).toBe(
        new nodeCrypto.X509Certificate(cert.certPem).serialNumber.toLowerCase(),
      );
      expect(cert.serialHex).toBe(parse(cert.certPem).serialNumber);
    }
    expect(a.serialHex).not.toBe(b.serialHex);
  });

  it("with no URIs has no SAN extension and CN forelead-client", async () => {
    const cert = await issueClientCertificate(ca, {});
    expect(parse(cert.certPem).getExtension(x509.SubjectAlternativeNameExtension)).toBeNull();
    expect(new nodeCrypto.X509Certificate(cert.certPem).subject).toBe("CN=forelead-client");
  });

  it("writes cA=true when asked (a bad leaf for tests)", async () => {
    const cert = await issueClientCertificate(ca, { uris: [SPIFFE_R1], isCA: true });
    const bc = ext(cert.certPem, x509.BasicConstraintsExtension);
    expect([bc.ca, bc.critical]).toEqual([true, true]);
    // Node's `ca` (OpenSSL X509_check_ca) also demands keyCertSign, which this leaf lacks:
    // code that must reject cA=true leaves has to read basicConstraints itself.
    expect(new nodeCrypto.X509Certificate(cert.certPem).ca).toBe(false);
  });

  it("honours notBefore, notAfter and lifetimeMs exactly", async () => {
    const notBefore = new Date("2020-05-06T07:08:09Z");
    const expired = await issueClientCertificate(ca, {
      notBefore,
      notAfter: new Date("2020-05-07T00:00:00Z"),
    });
    expect([parse(expired.certPem).notBefore, parse(expired.certPem).notAfter]).toEqual([
      notBefore,
      new Date("2020-05-07T00:00:00Z"),
    ]);
    const short = await issueClientCertificate(ca, { notBefore, lifetimeMs: 5 * 60_000 });
    expect(parse(short.certPem).notAfter).toEqual(new Date("2020-05-06T07:13:09Z"));
    await expect(issueClientCertificate(ca, { notBefore, notAfter: notBefore })).rejects.toThrow(
      /must be after/,
    );
  });

  it("issues Ed25519 client keys", async () => {
    const cert = await issueClientCertificate(ca, { uris: [SPIFFE_R1], keyAlgorithm: "Ed25519" });
    const node = new nodeCrypto.X509Certificate(cert.certPem);
    expect(node.publicKey.asymmetricKeyType).toBe("ed25519");
    expect(node.verify(caNode.publicKey)).toBe(true);
    const key = nodeCrypto.createPrivateKey(cert.keyPem);
    expect(key.asymmetricKeyType).toBe("ed25519");
    expect(node.checkPrivateKey(key)).toBe(true);
  });

  it("certifies a caller's public key and returns no private key", async () => {
    for (const kind of ["ec", "ed25519"] as const) {
      const pair =
        kind === "ec"
          ? nodeCrypto.generateKeyPairSync("ec", { namedCurve: "P-256" })
          : nodeCrypto.generateKeyPairSync("ed25519");
      const publicKeyPem = pair.publicKey.export({ type: "spki", format: "pem" }).toString();
      const cert = await issueClientCertificate(ca, { uris: [SPIFFE_R1], publicKeyPem });
      expect(cert.keyPem).toBe("");
      const node = new nodeCrypto.X509Certificate(cert.certPem);
      expect(node.verify(caNode.publicKey)).toBe(true);
      expect(node.checkPrivateKey(pair.privateKey)).toBe(true);
    }
    await expect(issueClientCertificate(ca, { publicKeyPem: ca.certPem })).rejects.toThrow(
      /BEGIN PUBLIC KEY/,
    );
    const pem = nodeCrypto
      .generateKeyPairSync("ed25519")
      .publicKey.export({ type: "spki", format: "pem" })
      .toString();
    await expect(
      issueClientCertificate(ca, { publicKeyPem: pem, keyAlgorithm: "Ed25519" }),
    ).rejects.toThrow(/mutually exclusive/);
  });

  it("refuses a CA key that does not belong to the CA certificate", async () => {
    const other = await createCertificateAuthority();
    await expect(
      issueClientCertificate({ certPem: ca.certPem, keyPem: other.keyPem }, {}),
    ).rejects.toThrow(/does not match/);
  });
});

describe("parseDuration", () => {
  it.each([
    ["24h", 24 * HOUR],
    ["90m", 90 * 60_000],
    ["30s", 30_000],
    ["15m", 15 * 60_000],
    ["1h30m", 90 * 60_000],
    ["7d", 7 * DAY],
    ["1d2h3m4s", DAY + 2 * HOUR + 3 * 60_000 + 4_000],
  ])("parses %s", (text, ms) => {
    expect(parseDuration(text)).toBe(ms);
  });

  it.each([
    "abc",
    "",
    "24",
    "h",
    "1.5h",
    "-1h",
    " 24h",
    "24 h",
    "24H",
    "30m1h",
    "1h1h",
    "1ms",
    "0s",
  ])("rejects %j", (text) => {
    expect(() => parseDuration(text)).toThrow(`--ttl: ${JSON.stringify(text)} is`);
  });

  it("explains the expected format", () => {
    expect(() => parseDuration("abc")).toThrow(
      '--ttl: "abc" is not a duration; use e.g. 24h, 90m, 30s',
    );
  });
});

describe("development PKI on disk", () => {
  const HOSTS = ["localhost", "127.0.0.1", "::1"];
  const readAll = async (dir: string) => {
    const p = devPkiPaths(dir);
    return Promise.all(
      [p.caCert, p.caKey, p.serverCert, p.serverKey].map((f) => readFile(f, "utf8")),
    );
  };
  const modeOf = async (path: string) => (await stat(path)).mode & 0o777;

  it("creates a CA and server pair once, with 0600 keys, and then leaves them alone", async () => {
    const dir = join(scratch, "init", "pki");
    const first = await initDevPki(dir, { hosts: HOSTS });
    expect(first).toEqual({ paths: devPkiPaths(dir), created: true });
    expect(await modeOf(dir)).toBe(0o700);
    expect(await modeOf(first.paths.caKey)).toBe(0o600);
    expect(await modeOf(first.paths.serverKey)).toBe(0o600);
    expect((await readdir(dir)).sort()).toEqual([
      "ca-key.pem",
      "ca.pem",
      "server-key.pem",
      "server.pem",
    ]);
    const [caPem, , serverPem] = await readAll(dir);
    const server = new nodeCrypto.X509Certificate(serverPem!);
    expect(server.verify(new nodeCrypto.X509Certificate(caPem!).publicKey)).toBe(true);
    expect(sans(serverPem!).map((n) => n.value)).toEqual(HOSTS);

    const before = await readAll(dir);
    expect(await initDevPki(dir, { hosts: HOSTS })).toEqual({
      paths: devPkiPaths(dir),
      created: false,
    });
    expect(await readAll(dir)).toEqual(before);

    expect((await initDevPki(dir, { hosts: HOSTS, force: true })).created).toBe(true);
    expect((await readAll(dir))[0]).not.toBe(before[0]);
  });

  it("re-issues a missing server pair from the existing CA and refuses half a CA pair", async () => {
    const dir = join(scratch, "partial");
    const { paths } = await initDevPki(dir, { hosts: HOSTS });
    const caPem = await readFile(paths.caCert, "utf8");
    await unlink(paths.serverCert);
    await unlink(paths.serverKey);
    expect((await initDevPki(dir, { hosts: HOSTS })).created).toBe(true);
    expect(await readFile(paths.caCert, "utf8")).toBe(caPem);
    const server = new nodeCrypto.X509Certificate(await readFile(paths.serverCert, "utf8"));
    expect(server.verify(new nodeCrypto.X509Certificate(caPem).publicKey)).toBe(true);

    await unlink(paths.caKey);
    await expect(initDevPki(dir, { hosts: HOSTS })).rejects.toThrow(
      /found .*ca\.pem but not .*ca-key\.pem/,
    );
  });

  it("loads the CA back, and says how to create one when it is missing", async () => {
    const dir = join(scratch, "load");
    const { paths } = await initDevPki(dir, { hosts: HOSTS });
    const loaded = await loadCertificateAuthority(dir);
    expect(loaded).toEqual({
      certPem: await readFile(paths.caCert, "utf8"),
      keyPem: await readFile(paths.caKey, "utf8"),
    });
    const empty = join(scratch, "empty");
    await expect(loadCertificateAuthority(empty)).rejects.toThrow(
      `CA file ${join(empty, "ca.pem")} does not exist; run \`forelead ca init --dir ${empty}\``,
    );
  });

  it("writes issued certificates atomically with a 0600 key", async () => {
    const cert = await issueClientCertificate(ca, { uris: [SPIFFE_R1] });
    const prefix = join(scratch, "issued", "runner1");
    expect(await writeIssued(prefix, cert)).toEqual({
      cert: `${prefix}.pem`,
      key: `${prefix}-key.pem`,
    });
    expect(await readFile(`${prefix}.pem`, "utf8")).toBe(cert.certPem);
    expect(await readFile(`${prefix}-key.pem`, "utf8")).toBe(cert.keyPem);
    expect(await modeOf(`${prefix}-key.pem`)).toBe(0o600);
    expect((await readdir(join(scratch, "issued"))).sort()).toEqual([
      "runner1-key.pem",
      "runner1.pem",
    ]);

    const publicOnly = { ...cert, keyPem: "" };
    expect(await writeIssued(join(scratch, "issued", "runner2"), publicOnly)).toMatchObject({
      key: "",
    });
    expect((await readdir(join(scratch, "issued"))).sort()).toEqual([
      "runner1-key.pem",
      "runner1.pem",
      "runner2.pem",
    ]);
  });
});

describe("mutual TLS with the issued certificates", () => {
  it.each(["P-256", "Ed25519"] as const)(
    "completes a TLS 1.3 handshake with a %s client",
    async (keyAlgorithm) => {
      const server = await issueServerCertificate(ca, { hosts: ["localhost", "127.0.0.1"] });
      const client = await issueClientCertificate(ca, { uris: [SPIFFE_R1], keyAlgorithm });
      const seen = await handshake(server, client, ca.certPem);
      expect(seen.equals(new nodeCrypto.X509Certificate(client.certPem).raw)).toBe(true);
    },
  );

  it("is refused with a client certificate from another CA", async () => {
    const stranger = await createCertificateAuthority({ commonName: "Stranger" });
    const server = await issueServerCertificate(ca, { hosts: ["127.0.0.1"] });
    const client = await issueClientCertificate(stranger, { uris: [SPIFFE_R1] });
    await expect(handshake(server, client, ca.certPem)).rejects.toThrow();
  });
});

/**
 * Runs a mutual-TLS handshake on 127.0.0.1 and resolves with the raw DER of the
 * client certificate as the server saw it; rejects if the server refuses it.
 */
async function handshake(
  server: IssuedCertificate,
  client: IssuedCertificate,
  caPem: string,
): Promise<Buffer> {
  const tlsServer = tls.createServer({
    key: server.keyPem,
    cert: server.certPem,
    ca: caPem,
    requestCert: true,
    rejectUnauthorized: true,
    minVersion: "TLSv1.3",
  });
  const sockets: tls.TLSSocket[] = [];
  try {
    const serverSaw = new Promise<Buffer>((resolve, reject) => {
      tlsServer.once("secureConnection", (socket: tls.TLSSocket) => {
        sockets.push(socket);
        resolve(socket.getPeerCertificate().raw);
      });
      tlsServer.once("tlsClientError", reject);
    });
    tlsServer.listen(0, "127.0.0.1");
    await once(tlsServer, "listening");
    const { port } = tlsServer.address() as AddressInfo;
    const socket = tls.connect({
      host: "127.0.0.1",
      port,
      ca: caPem,
      cert: client.certPem,
      key: client.keyPem,
    });
    sockets.push(socket);
    // The server's verdict is what callers assert on; a refused client also gets an alert here.
    socket.on("error", () => {});
    const clientConnected = once(socket, "secureConnect");
    clientConnected.catch(() => {});
    const raw = await serverSaw;
    await clientConnected;
    expect(socket.authorized).toBe(true); // the client checked the server's chain and IP SAN
    expect(socket.getProtocol()).toBe("TLSv1.3");
    return raw;
  } finally {
    for (const s of sockets) s.destroy();
    await new Promise<void>((resolve) => tlsServer.close(() => resolve()));
  }
}
