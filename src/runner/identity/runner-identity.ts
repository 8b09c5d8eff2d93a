import "reflect-metadata"; // @peculiar/x509 needs it loaded first
import * as x509 from "@peculiar/x509";
import { principalOf, runnerPathShape } from "../../identity/principal.js";
import { parseSpiffeId } from "../../identity/spiffe.js";

/** Who a runner is, as its certificate says. */
export interface RunnerIdentity {
  readonly spiffeId: string;
  readonly runnerId: string;
  readonly workspaceId: string;
  readonly notAfter: Date;
}

/**
 * Reads the runner and workspace from the only URI SAN of a runner
 * certificate (PEM), parsing the DER, never Node's subjectaltname string.
 * Throws with the reason when the certificate is not a runner's.
 */
export function runnerIdentityFromCertificate(certPem: string, source = "the certificate"): RunnerIdentity {
  let cert: x509.X509Certificate;
  try {
    cert = new x509.X509Certificate(certPem);
  } catch (err) {
    throw new Error(`${source} is not a PEM certificate: ${(err as Error).message}`);
  }
  const uris = cert
    .getExtensions(x509.SubjectAlternativeNameExtension)
    .flatMap((ext) => ext.names.items.filter((n) => n.type === "url").map((n) => n.value));
  if (uris.length !== 1) throw new Error(`${source} has ${uris.length} URI SANs; a runner certificate has exactly one, its SPIFFE ID`);
  const principal = principalOf(parseSpiffeId(uris[0]!));
  if (principal.kind !== "runner") throw new Error(`${source} is for ${principal.spiffeId.text}, not a runner (${runnerPathShape})`);
  return { spiffeId: principal.spiffeId.text, runnerId: principal.runnerId, workspaceId: principal.workspaceId, notAfter: cert.notAfter };
}
