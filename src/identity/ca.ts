// The PKI that mutual TLS between the control plane and its runners rests on:
// a development CA, server certificates, and short-lived runner client
// certificates whose only URI SAN is the runner's SPIFFE ID. Tests also use it
// to mint deliberately bad certificates (extra SANs, cA=true leaves, odd
// validity), so options are written into the certificate as given.
import "reflect-metadata"; // @peculiar/x509 uses decorators that need it loaded first.
import * as nodeCrypto from "node:crypto";
import { isIP } from "node:net";
import * as x509 from "@peculiar/x509";
import { readSigningKey, type SigningKey } from "./signing-key.js";

// The project compiles without the DOM lib, so the WebCrypto types come from Node.
type CryptoKey = nodeCrypto.webcrypto.CryptoKey;
type CryptoKeyPair = nodeCrypto.webcrypto.CryptoKeyPair;

// One WebCrypto implementation for everything: Node's own.
x509.cryptoProvider.set(globalThis.crypto);

const ECDSA_P256 = { name: "ECDSA", namedCurve: "P-256" } as const;
const ECDSA_SHA256 = { name: "ECDSA", hash: "SHA-256" } as const;
const SECOND_MS = 1000;
const HOUR_MS = 60 * 60 * SECOND_MS;
const DAY_MS = 24 * HOUR_MS;
/** Leaves are backdated this much so a runner whose clock is a little behind still accepts them. */
const CLOCK_SKEW_MS = 60 * SECOND_MS;

/** A certificate with its private key, as PEM, plus the facts callers usually log or check. */
export interface IssuedCertificate {
  readonly certPem: string;
  /** PKCS#8 PEM ("BEGIN PRIVATE KEY"); "" when the caller supplied only a public key. */
  readonly keyPem: string;
  /** Serial number as lowercase hex of the positive integer (no sign-padding 00 byte). */
  readonly serialHex: string;
  /** Exactly as encoded in the certificate, i.e. truncated to whole seconds. */
  readonly notBefore: Date;
  readonly notAfter: Date;
}

/** What is needed to sign with a CA: its certificate and PKCS#8 private key, both PEM. */
export interface CertificateAuthority {
  readonly certPem: string;
  readonly keyPem: string;
}

/**
 * Creates a self-signed ECDSA P-256 root CA (cA=true, keyCertSign+cRLSign),
 * valid for 10 years from `notBefore` unless `notAfter` is given.
 */
export async function createCertificateAuthority(
  opts: { commonName?: string; notBefore?: Date; notAfter?: Date } = {},
): Promise<IssuedCertificate> {
  const notBefore = wholeSeconds(opts.notBefore ?? new Date(Date.now() - CLOCK_SKEW_MS));
  const notAfter = wholeSeconds(opts.notAfter ?? new Date(notBefore.getTime() + 3652 * DAY_MS));
  checkValidity(notBefore, notAfter);
  const keys = await generateKeyPair("P-256");
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: randomSerialHex(),
    name: commonNameOnly(opts.commonName ?? "Forelead Development CA"),
    notBefore,
    notAfter,
    keys,
    signingAlgorithm: ECDSA_SHA256,
    extensions: [
      new x509.BasicConstraintsExtension(true, undefined, true),
      new x509.KeyUsagesExtension(
        x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign,
        true,
      ),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
  return issued(cert, await privateKeyPem(keys.privateKey));
}

/**
 * Issues a TLS server certificate (EKU serverAuth, cA=false) for `hosts`:
 * IPv4/IPv6 literals become iPAddress SANs, everything else dNSName SANs.
 */
export async function issueServerCertificate(
  ca: CertificateAuthority,
  opts: { hosts: readonly string[]; lifetimeMs?: number },
): Promise<IssuedCertificate> {
  if (opts.hosts.length === 0)
    throw new Error("a server certificate needs at least one host name or IP address");
  const names = opts.hosts.map(hostToGeneralName);
  const notBefore = wholeSeconds(new Date(Date.now() - CLOCK_SKEW_MS));
  const notAfter = wholeSeconds(new Date(notBefore.getTime() + (opts.lifetimeMs ?? 365 * DAY_MS)));
  checkValidity(notBefore, notAfter);
  const keys = await generateKeyPair("P-256");
  const cert = await signLeaf(ca, {
    commonName: opts.hosts[0] ?? "forelead-server",
    publicKey: keys.publicKey,
    notBefore,
    notAfter,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
      new x509.SubjectAlternativeNameExtension(names),
    ],
  });
  return issued(cert, await privateKeyPem(keys.privateKey));
}

/** How to shape a client certificate; every field has a safe default. */
export interface ClientCertificateOptions {
  /** URI SANs, written verbatim, one SAN per element (even if it contains commas). */
  uris?: readonly string[];
  /** DNS SANs, written verbatim. */
  dnsNames?: readonly string[];
  /** Default: now minus 60 s, to tolerate clock skew. */
  notBefore?: Date;
  /** Default: notBefore + lifetimeMs. */
  notAfter?: Date;
  /**
   * Default: 24 h minus 2 min, so that skew backdating still fits a 24 h maximum-lifetime policy.
   */
  lifetimeMs?: number;
  /** Default false; true writes basicConstraints cA=true, which a server must refuse for a leaf. */
  isCA?: boolean;
  /** Key type generated for the certificate; default P-256 (ECDSA). */
  keyAlgorithm?: "P-256" | "Ed25519";
  /**
   * Certify this SPKI public key (PEM "BEGIN PUBLIC KEY") instead of generating one; keyPem is then
   * "".
   */
  publicKeyPem?: string;
}

/** Default client certificate lifetime (see ClientCertificateOptions.lifetimeMs). */
const DEFAULT_CLIENT_LIFETIME_MS = DAY_MS - 2 * 60 * SECOND_MS;

/**
 * Issues a TLS client certificate: EKU clientAuth, critical keyUsage
 * digitalSignature, random 128-bit serial, subject CN = first URI (or
 * "forelead-client"). Runner identity lives in the URI SAN, not the CN.
 */
export async function issueClientCertificate(
  ca: CertificateAuthority,
  opts: ClientCertificateOptions,
): Promise<IssuedCertificate> {
  if (opts.publicKeyPem !== undefined && opts.keyAlgorithm !== undefined) {
    throw new Error(
      "keyAlgorithm and publicKeyPem are mutually exclusive: the given public key decides the algorithm",
    );
  }
  const notBefore = wholeSeconds(opts.notBefore ?? new Date(Date.now() - CLOCK_SKEW_MS));
  const lifetimeMs = opts.lifetimeMs ?? DEFAULT_CLIENT_LIFETIME_MS;
  const notAfter = wholeSeconds(opts.notAfter ?? new Date(notBefore.getTime() + lifetimeMs));
  checkValidity(notBefore, notAfter);

  let publicKey: x509.PublicKey | CryptoKey;
  let keyPem = "";
  if (opts.publicKeyPem !== undefined) {
    publicKey = publicKeyFromPem(opts.publicKeyPem);
  } else {
    const keys = await generateKeyPair(opts.keyAlgorithm ?? "P-256");
    publicKey = keys.publicKey;
    keyPem = await privateKeyPem(keys.privateKey);
  }

  const uris = opts.uris ?? [];
  const sans: x509.JsonGeneralName[] = [
    ...uris.map((value) => ({ type: "url" as const, value })),
    ...(opts.dnsNames ?? []).map((value) => ({ type: "dns" as const, value })),
  ];
  const extensions: x509.Extension[] = [
    new x509.BasicConstraintsExtension(opts.isCA ?? false, undefined, true),
    new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
    new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.clientAuth]),
  ];
  // No SANs at all is a legitimate "bad certificate" for tests; an empty SAN extension would be
  // malformed.
  if (sans.length > 0) extensions.push(new x509.SubjectAlternativeNameExtension(sans));

  const cert = await signLeaf(ca, {
    commonName: uris[0] ?? "forelead-client",
    publicKey,
    notBefore,
    notAfter,
    extensions,
  });
  return issued(cert, keyPem);
}

/**
 * Parses a CLI duration such as "24h", "90m", "30s", "7d" or "1h30m" into
 * milliseconds. Units appear at most once, largest first; the total must be > 0.
 */
export function parseDuration(text: string): number {
  const match = /^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$/.exec(text);
  const hint = "use e.g. 24h, 90m, 30s";
  if (match === null || text === "")
    throw new Error(`--ttl: ${JSON.stringify(text)} is not a duration; ${hint}`);
  const [, d, h, m, s] = match;
  const ms =
    Number(d ?? 0) * DAY_MS +
    Number(h ?? 0) * HOUR_MS +
    Number(m ?? 0) * 60 * SECOND_MS +
    Number(s ?? 0) * SECOND_MS;
  if (!Number.isSafeInteger(ms))
    throw new Error(`--ttl: ${JSON.stringify(text)} is too long; ${hint}`);
  if (ms === 0)
    throw new Error(
      `--ttl: ${JSON.stringify(text)} is zero; a certificate needs a positive lifetime`,
    );
  return ms;
}

// ---------------------------------------------------------------------------

interface LeafTemplate {
  commonName: string;
  publicKey: x509.PublicKey | CryptoKey;
  notBefore: Date;
  notAfter: Date;
  extensions: x509.Extension[];
}

/** Signs a leaf with the CA, copying the issuer name and key identifier from the CA certificate. */
async function signLeaf(
  ca: CertificateAuthority,
  leaf: LeafTemplate,
): Promise<x509.X509Certificate> {
  const { cert: caCert, signingKey, signingAlgorithm } = await openCertificateAuthority(ca);
  // RFC 5280: the AKI of a leaf should equal the issuer's SKI, so reuse it rather than recompute.
  const caSki = caCert.getExtension(x509.SubjectKeyIdentifierExtension);
  const aki = caSki
    ? new x509.AuthorityKeyIdentifierExtension(caSki.keyId)
    : await x509.AuthorityKeyIdentifierExtension.create(caCert.publicKey);
  return x509.X509CertificateGenerator.create({
    serialNumber: randomSerialHex(),
    subject: commonNameOnly(leaf.commonName),
    // The parsed CA subject re-encodes byte for byte, so name chaining matches exactly.
    issuer: caCert.subjectName,
    notBefore: leaf.notBefore,
    notAfter: leaf.notAfter,
    publicKey: leaf.publicKey,
    signingKey,
    signingAlgorithm,
    extensions: [
      ...leaf.extensions,
      await x509.SubjectKeyIdentifierExtension.create(leaf.publicKey),
      aki,
    ],
  });
}

/**
 * Checks that `ca` can sign: a CA certificate with an ECDSA P-256 or RSA key and the private key
 * that belongs to it (PKCS#8, SEC1 or PKCS#1 PEM). Throws with the reason, so a control plane
 * refuses a bad issuer at start-up rather than at the first enrollment.
 */
export async function checkCertificateAuthority(ca: CertificateAuthority): Promise<void> {
  await openCertificateAuthority(ca);
}

/** Parses the CA and imports its key, refusing a key that does not belong to the certificate. */
async function openCertificateAuthority(ca: CertificateAuthority): Promise<{
  cert: x509.X509Certificate;
  signingKey: CryptoKey;
  signingAlgorithm: SigningKey["signingAlgorithm"];
}> {
  const nodeCert = new nodeCrypto.X509Certificate(ca.certPem);
  if (!nodeCert.ca)
    throw new Error(
      `CA certificate ${nodeCert.subject} is not a CA (basicConstraints cA is false)`,
    );
  const key = readSigningKey(ca.keyPem, "the CA key");
  // Without this check a mismatched key would yield certificates that silently fail to verify.
  if (!nodeCert.checkPrivateKey(key.key)) {
    throw new Error("CA private key does not match the CA certificate");
  }
  const cert = new x509.X509Certificate(ca.certPem);
  const signingKey = await globalThis.crypto.subtle.importKey(
    "pkcs8",
    key.pkcs8,
    key.importAlgorithm,
    false,
    ["sign"],
  );
  return { cert, signingKey, signingAlgorithm: key.signingAlgorithm };
}

/** Maps a host to an iPAddress or dNSName SAN. */
function hostToGeneralName(host: string): x509.JsonGeneralName {
  // Accept the URL form "[::1]" too, since that is how IPv6 hosts are often written.
  const bare = host.startsWith("[") && host.endsWith("]") ? host.slice(1, -1) : host;
  const family = isIP(bare);
  if (family === 4) return { type: "ip", value: bare };
  if (family === 6) {
    if (bare.includes("%"))
      throw new Error(`IPv6 zone identifiers cannot go in a certificate: ${JSON.stringify(host)}`);
    // The encoder only understands hex groups; canonicalise forms like "::ffff:127.0.0.1" first.
    return { type: "ip", value: new URL(`http://[${bare}]/`).hostname.slice(1, -1) };
  }
  if (host === "" || /[\s/]/.test(host))
    throw new Error(`not a host name or IP address: ${JSON.stringify(host)}`);
  return { type: "dns", value: host };
}

/**
 * A subject consisting of one CN, encoded as UTF8String and never reparsed as a DN string (URIs
 * contain commas).
 */
function commonNameOnly(commonName: string): x509.Name {
  return new x509.Name([{ CN: [{ utf8String: commonName }] }]);
}

/**
 * 128 random bits as the serial (CA/Browser Forum asks for at least 64).
 * The encoder prepends a 00 byte when the top bit is set, keeping it positive.
 */
function randomSerialHex(): string {
  const bytes = nodeCrypto.randomBytes(16);
  // A leading zero byte would be stripped in DER; keep the serial a full 128 bits.
  if (bytes[0] === 0) bytes[0] = 1;
  return bytes.toString("hex");
}

async function generateKeyPair(algorithm: "P-256" | "Ed25519"): Promise<CryptoKeyPair> {
  const params = algorithm === "Ed25519" ? { name: "Ed25519" } : ECDSA_P256;
  return (await globalThis.crypto.subtle.generateKey(params, true, [
    "sign",
    "verify",
  ])) as CryptoKeyPair;
}

async function privateKeyPem(key: CryptoKey): Promise<string> {
  return (
    x509.PemConverter.encode(
      await globalThis.crypto.subtle.exportKey("pkcs8", key),
      "PRIVATE KEY",
    ) + "\n"
  );
}

function publicKeyFromPem(pem: string): x509.PublicKey {
  if (!pem.includes("-----BEGIN PUBLIC KEY-----")) {
    throw new Error('publicKeyPem must be an SPKI PEM ("-----BEGIN PUBLIC KEY-----")');
  }
  // Node validates the key itself (curve point, algorithm), which the ASN.1 parser does not.
  const der = nodeCrypto.createPublicKey(pem).export({ type: "spki", format: "der" });
  return new x509.PublicKey(der);
}

function issued(cert: x509.X509Certificate, keyPem: string): IssuedCertificate {
  return {
    certPem: cert.toString("pem") + "\n",
    keyPem,
    serialHex: cert.serialNumber.toLowerCase(),
    notBefore: cert.notBefore,
    notAfter: cert.notAfter,
  };
}

/**
 * X.509 times have whole-second precision; truncate up front so returned dates match the
 * certificate.
 */
function wholeSeconds(date: Date): Date {
  const ms = date.getTime();
  if (Number.isNaN(ms)) throw new Error("invalid date");
  return new Date(ms - (((ms % SECOND_MS) + SECOND_MS) % SECOND_MS));
}

function checkValidity(notBefore: Date, notAfter: Date): void {
  if (notAfter.getTime() <= notBefore.getTime()) {
    throw new Error(
      `notAfter (${notAfter.toISOString()}) must be after notBefore (${notBefore.toISOString()})`,
    );
  }
}
