import {
  createPrivateKey,
  generateKeyPairSync,
  randomBytes,
  sign,
  X509Certificate,
} from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import {
  createCertificateAuthority,
  issueClientCertificate,
  issueServerCertificate,
  type IssuedCertificate,
} from "../../src/identity/ca.js";

/** The admin identity every benchmark control plane grants. */
export const benchAdminId = "spiffe://forelead/services/bench-admin";

/** A client identity as a client process needs it. */
interface ClientIdentity {
  readonly certPem: string;
  readonly keyPem: string;
}

/** A runner's identity: its id and certificate. */
export interface RunnerIdentity extends ClientIdentity {
  readonly runnerId: string;
  readonly workspaceId: string;
}

/** A throwaway PKI for one benchmark run, with its PEM files on disk for `forelead serve`. */
export interface BenchPki {
  readonly ca: IssuedCertificate;
  readonly server: IssuedCertificate;
  readonly admin: ClientIdentity;
  readonly files: { readonly cert: string; readonly key: string; readonly ca: string };
  /**
   * `count` runner certificates in `workspaceId`, runner ids `${prefix}0000`, `${prefix}0001`, ...
   */
  runners(prefix: string, count: number, workspaceId: string): Promise<RunnerIdentity[]>;
  dispose(): Promise<void>;
}

/**
 * Makes a CA, a loopback server certificate and an admin certificate, all
 * with src/identity/ca.ts.
 */
export async function createBenchPki(): Promise<BenchPki> {
  const ca = await createCertificateAuthority({ commonName: "forelead bench CA" });
  const server = await issueServerCertificate(ca, { hosts: ["127.0.0.1", "localhost"] });
  const admin = await issueClientCertificate(ca, { uris: [benchAdminId] });
  const { publicKey, privateKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
  const runnerKeyPem = privateKey.export({ type: "pkcs8", format: "pem" }).toString();
  const publicKeyPem = publicKey.export({ type: "spki", format: "pem" }).toString();
  const dir = await mkdtemp(path.join(os.tmpdir(), "forelead-bench-pki-"));
  const files = {
    cert: path.join(dir, "server.pem"),
    key: path.join(dir, "server-key.pem"),
    ca: path.join(dir, "ca.pem"),
  };
  await writeFile(files.cert, server.certPem);
  await writeFile(files.key, server.keyPem, { mode: 0o600 });
  await writeFile(files.ca, ca.certPem);
  return {
    ca,
    server,
    admin: { certPem: admin.certPem, keyPem: admin.keyPem },
    files,
    async runners(prefix, count, workspaceId) {
      const width = Math.max(4, String(count - 1).length);
      const mint = await runnerMinter(ca, publicKeyPem, prefix, width, workspaceId);
      return Array.from({ length: count }, (_, i) => {
        const runnerId = `${prefix}${String(i).padStart(width, "0")}`;
        return { runnerId, workspaceId, certPem: mint(runnerId), keyPem: runnerKeyPem };
      });
    },
    dispose: () => rm(dir, { recursive: true, force: true }),
  };
}

/**
 * Runner certificates at the rate of a signature each. ca.ts takes several
 * milliseconds per certificate (ASN.1 through @peculiar/x509), which for
 * 10,000 runners is minutes; so one certificate is issued by ca.ts as a
 * template, and each runner's is that template with the runner id (same
 * length, in the subject CN and the URI SAN) and the serial number replaced,
 * signed again by the CA key. All certify one key pair: the server tells
 * runners apart by certificate, not by key. The first is checked with
 * node:crypto against the CA.
 */
async function runnerMinter(
  ca: IssuedCertificate,
  publicKeyPem: string,
  prefix: string,
  width: number,
  workspaceId: string,
): Promise<(runnerId: string) => string> {
  const placeholder = `${prefix}${"0".repeat(width)}`;
  const template = await issueClientCertificate(ca, {
    uris: [`spiffe://forelead/runners/${placeholder}/workspaces/${workspaceId}`],
    publicKeyPem,
  });
  const der = new X509Certificate(template.certPem).raw;
  const outer = readTlv(der, 0);
  const tbsTlv = readTlv(der, outer.contentStart);
  const algTlv = readTlv(der, tbsTlv.end);
  const tbsTemplate = der.subarray(tbsTlv.start, tbsTlv.end);
  const algorithm = der.subarray(algTlv.start, algTlv.end);
  const idAt = occurrences(tbsTemplate, Buffer.from(placeholder));
  const serial = Buffer.from(
    template.serialHex.length % 2 ? `0${template.serialHex}` : template.serialHex,
    "hex",
  );
  const serialAt = occurrences(tbsTemplate, serial);
  if (idAt.length !== 2 || serialAt.length !== 1)
    throw new Error(
      `unexpected certificate template (${idAt.length} ids, ${serialAt.length} serials)`,
    );
  const caKey = createPrivateKey(ca.keyPem);
  const caCert = new X509Certificate(ca.certPem);
  let checked = false;
  return (runnerId) => {
    if (runnerId.length !== placeholder.length)
      throw new Error(`runner id ${runnerId} must have ${placeholder.length} characters`);
    const tbs = Buffer.from(tbsTemplate);
    for (const at of idAt) tbs.write(runnerId, at, "latin1");
    // A fresh serial of the same length and sign, so the DER lengths stay as they are.
    const fresh = randomBytes(serial.length);
    fresh[0] = serial[0]! >= 0x80 ? fresh[0]! | 0x80 : (fresh[0]! & 0x7f) | 0x01;
    fresh.copy(tbs, serialAt[0]!);
    const signature = sign("sha256", tbs, caKey);
    const cert = tlv(
      0x30,
      Buffer.concat([tbs, algorithm, tlv(0x03, Buffer.concat([Buffer.from([0]), signature]))]),
    );
    const pem =
      `-----BEGIN ` +
      `CERTIFICATE-----\n${cert.toString("base64").replace(/.{64}/g, "$&\n").replace(/\n?$/, "\n")}-----END ` +
      `CERTIFICATE-----\n`;
    if (!checked) {
      const parsed = new X509Certificate(pem);
      if (
        !parsed.verify(caCert.publicKey) ||
        !parsed.subjectAltName?.includes(`/runners/${runnerId}/`)
      )
        throw new Error("a minted runner certificate does not verify");
      checked = true;
    }
    return pem;
  };
}

function readTlv(buf: Buffer, start: number): { start: number; contentStart: number; end: number } {
  let length = buf[start + 1]!;
  let contentStart = start + 2;
  if (length & 0x80) {
    const bytes = length & 0x7f;
    length = 0;
    for (let i = 0; i < bytes; i++) length = length * 256 + buf[start + 2 + i]!;
    contentStart += bytes;
  }
  return { start, contentStart, end: contentStart + length };
}

function tlv(tag: number, content: Buffer): Buffer {
  const n = content.length;
  const length = n < 0x80 ? [n] : n < 0x100 ? [0x81, n] : [0x82, n >> 8, n & 0xff];
  return Buffer.concat([Buffer.from([tag, ...length]), content]);
}

function occurrences(haystack: Buffer, needle: Buffer): number[] {
  const out: number[] = [];
  for (let at = haystack.indexOf(needle); at !== -1; at = haystack.indexOf(needle, at + 1))
    out.push(at);
  return out;
}
