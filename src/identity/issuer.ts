import { X509Certificate as NodeX509, createHash } from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import { checkCertificateAuthority, issueClientCertificate } from "./ca.js";
import type { VerifiedCsr } from "./csr.js";

/**
 * The issuing CA as configured: PEM files, the certificate file possibly followed by its own chain.
 */
export interface IssuerMaterial {
  readonly certPem: string;
  readonly keyPem: string;
}

/** A certificate the issuer just signed. */
export interface SignedCertificate {
  readonly spiffeId: string;
  readonly serialHex: string;
  /** SHA-256 of the DER, lowercase hex (the fingerprint the audit trail records). */
  readonly sha256: string;
  readonly notBefore: Date;
  readonly notAfter: Date;
  /** The leaf, then the issuer's intermediates (never a self-signed root), PEM. */
  readonly chainPem: string;
}

/** Signs runner certificates with the control plane's issuing CA. */
export interface Issuer {
  /** e.g. `CN=Forelead Development CA (until 2036-...)`, for the start-up line. */
  readonly description: string;
  /** When the issuing CA's certificate ends. */
  readonly notAfter: Date;
  /**
   * Signs a certificate for `spiffeId` (its only URI SAN) over the CSR's key, for the issuer's
   * lifetime or `maxLifetimeMs` when shorter.
   */
  sign(spiffeId: string, csr: VerifiedCsr, maxLifetimeMs?: number): Promise<SignedCertificate>;
}

/**
 * Leaves are backdated by a minute so a runner whose clock is a little behind
 * accepts them; by a tenth of the lifetime when that is shorter, so a
 * short-lived certificate is not born nearly expired.
 */
const maxClockSkewMs = 60_000;

/**
 * Loads the issuer and checks it before anything is served: a CA with an ECDSA P-256 or RSA key
 * that matches (PKCS#8, SEC1 or PKCS#1 PEM), valid now, and trusted by the client trust bundle
 * (itself an anchor, or chaining to one through the certificates that follow it in its file) —
 * otherwise every certificate it signs would be refused by this very control plane. Leaves get
 * `lifetimeMs`, cut short so they never outlive the issuer.
 */
export async function createIssuer(
  material: IssuerMaterial,
  trustAnchors: readonly NodeX509[],
  lifetimeMs: number,
): Promise<Issuer> {
  const blocks =
    material.certPem.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
  if (blocks.length === 0) throw new Error("the issuer certificate file holds no PEM certificate");
  const [issuerPem, ...restPem] = blocks as [string, ...string[]];
  const ca = { certPem: `${issuerPem}\n`, keyPem: material.keyPem };
  try {
    await checkCertificateAuthority(ca);
  } catch (err) {
    throw new Error(`the issuer cannot sign runner certificates: ${(err as Error).message}`);
  }
  const issuerCert = new NodeX509(issuerPem);
  const rest = restPem.map((p) => new NodeX509(p));
  const notAfter = new Date(issuerCert.validTo);
  if (notAfter.getTime() <= Date.now())
    throw new Error(
      `the issuer certificate ${issuerCert.subject} expired at ${notAfter.toISOString()}`,
    );
  if (!trustedBy(issuerCert, rest, trustAnchors)) {
    throw new Error(
      `the issuer certificate ${issuerCert.subject.replace(/\n/g, ", ")} is ` +
        `not trusted by the client CA bundle; add it (or its root) to ` +
        `--client-ca, or the certificates it issues would be refused`,
    );
  }
  // Runners send this chain in their handshake; a self-signed root is the anchor the server already
  // has.
  const chain = [issuerCert, ...rest].filter((c) => !selfSigned(c)).map((c) => c.toString().trim());

  return {
    description: `${issuerCert.subject.replace(/\n/g, ", ")} (valid until ${notAfter.toISOString()})`,
    notAfter,
    async sign(spiffeId, csr, maxLifetimeMs = lifetimeMs) {
      const life = Math.min(lifetimeMs, maxLifetimeMs);
      const notBefore = new Date(Date.now() - Math.min(maxClockSkewMs, life / 10));
      const leafNotAfter = new Date(Math.min(notBefore.getTime() + life, notAfter.getTime()));
      if (leafNotAfter.getTime() - Date.now() < Math.min(60_000, life / 2)) {
        throw new ConnectError(
          `the issuing CA expires at ${notAfter.toISOString()}; the control plane ` +
            `needs a new issuer before it can sign certificates`,
          Code.FailedPrecondition,
        );
      }
      const issued = await issueClientCertificate(ca, {
        uris: [spiffeId],
        publicKeyPem: csr.publicKeyPem,
        notBefore,
        notAfter: leafNotAfter,
      });
      const der = new NodeX509(issued.certPem).raw;
      return {
        spiffeId,
        serialHex: issued.serialHex,
        sha256: createHash("sha256").update(der).digest("hex"),
        notBefore: issued.notBefore,
        notAfter: issued.notAfter,
        chainPem: [issued.certPem.trim(), ...chain].join("\n") + "\n",
      };
    },
  };
}

function selfSigned(c: NodeX509): boolean {
  return c.checkIssued(c) && c.verify(c.publicKey);
}

/** True when `cert` is an anchor, or is signed by one, possibly through `intermediates`. */
function trustedBy(
  cert: NodeX509,
  intermediates: readonly NodeX509[],
  anchors: readonly NodeX509[],
): boolean {
  let current = cert;
  let pool = [...intermediates];
  for (let depth = 0; depth < 5; depth++) {
    if (
      anchors.some(
        (a) => a.raw.equals(current.raw) || (current.checkIssued(a) && current.verify(a.publicKey)),
      )
    )
      return true;
    const next = pool.find((c) => c.ca && current.checkIssued(c) && current.verify(c.publicKey));
    if (!next) return false;
    pool = pool.filter((c) => c !== next);
    current = next;
  }
  return false;
}
