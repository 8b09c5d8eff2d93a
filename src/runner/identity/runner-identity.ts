import { X509Certificate, createPrivateKey } from "node:crypto";
import { readLeafFields } from "../../identity/leaf-fields.js";
import { principalOf, runnerPathShape, type Principal } from "../../identity/principal.js";
import { parseSpiffeId } from "../../identity/spiffe.js";

/** A runner as src/identity/principal.ts reads it from a SPIFFE ID. */
type RunnerPrincipal = Extract<Principal, { kind: "runner" }>;

/**
 * Who a runner is: the runner principal its certificate's only URI SAN
 * names, the certificate's serial and validity, and the certificate and key
 * that prove it.
 */
export interface RunnerIdentity extends Pick<RunnerPrincipal, "runnerId" | "workspaceId"> {
  /** The SPIFFE ID, as the certificate writes it. */
  readonly spiffeId: string;
  /** The certificate then any intermediates, PEM. */
  readonly certPem: string;
  /** PKCS#8 PEM. */
  readonly keyPem: string;
  readonly serialHex: string;
  readonly notBefore: Date;
  readonly notAfter: Date;
}

/** What a runner certificate says on its own, without the key. */
export type RunnerCertificate = Omit<RunnerIdentity, "keyPem">;

/**
 * Reads the runner identity a certificate (PEM, leaf first) names: its only
 * URI SAN, read from the DER (never Node's subjectaltname string), must be a
 * runner's SPIFFE ID. Throws with the reason when it is not; `source` names
 * the certificate in the message.
 */
export function readRunnerCertificate(
  certPem: string,
  source = "the certificate",
): RunnerCertificate {
  let cert: X509Certificate;
  let leaf: ReturnType<typeof readLeafFields>;
  try {
    cert = new X509Certificate(certPem);
    leaf = readLeafFields(cert.raw);
  } catch (err) {
    throw new Error(`${source} is not a PEM certificate: ${(err as Error).message}`);
  }
  if (leaf.uris.length !== 1)
    throw new Error(
      `${source} has ${leaf.uris.length} URI SANs; a runner certificate has exactly one, its SPIFFE ID`,
    );
  const principal = principalOf(parseSpiffeId(leaf.uris[0]!));
  if (principal.kind !== "runner")
    throw new Error(
      `${source} is for ${principal.spiffeId.text}, not a runner (${runnerPathShape})`,
    );
  return {
    spiffeId: principal.spiffeId.text,
    runnerId: principal.runnerId,
    workspaceId: principal.workspaceId,
    certPem,
    serialHex: leaf.serialHex,
    notBefore: new Date(cert.validFrom),
    notAfter: new Date(cert.validTo),
  };
}

/** A runner identity from its certificate and key; refuses a key that is not the certificate's. */
export function runnerIdentityOf(
  certPem: string,
  keyPem: string,
  source = "the certificate",
): RunnerIdentity {
  if (!keyMatches(certPem, keyPem))
    throw new Error(`${source} does not belong to this runner's key`);
  return { ...readRunnerCertificate(certPem, source), keyPem };
}

/** Whether `keyPem` is the private key of the certificate `certPem`. */
export function keyMatches(certPem: string, keyPem: string): boolean {
  try {
    return new X509Certificate(certPem).checkPrivateKey(createPrivateKey(keyPem));
  } catch {
    return false;
  }
}
