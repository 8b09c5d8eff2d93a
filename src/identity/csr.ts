import "reflect-metadata";
import * as nodeCrypto from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import * as x509 from "@peculiar/x509";

/** Largest CSR accepted, in characters of PEM: a P-256 or Ed25519 CSR is well under 1 KiB. */
const maxCsrLength = 16 * 1024;

/** A CSR whose signature verified, reduced to what the issuer uses: its public key. */
export interface VerifiedCsr {
  /** SPKI PEM ("BEGIN PUBLIC KEY"). */
  readonly publicKeyPem: string;
  readonly keyAlgorithm: "P-256" | "Ed25519";
}

/**
 * Parses a PEM PKCS#10 request and verifies its self-signature (proof that
 * the caller holds the private key). Only ECDSA P-256 and Ed25519 keys are
 * accepted. The subject and any requested extensions (SANs included) are
 * ignored on purpose: the certificate's identity comes from the grant or the
 * caller's current certificate, never from the CSR.
 */
export async function verifyCsr(pem: string): Promise<VerifiedCsr> {
  const refuse = (message: string): never => {
    throw new ConnectError(message, Code.InvalidArgument);
  };
  if (!pem)
    refuse(
      'csr is required: a PEM PKCS#10 request ("-----BEGIN CERTIFICATE REQUEST-----") made with the runner\'s new key',
    );
  if (pem.length > maxCsrLength)
    refuse(
      `csr is longer than ${maxCsrLength} characters; a P-256 or Ed25519 request is under 1 KiB`,
    );
  if (!pem.includes("-----BEGIN CERTIFICATE REQUEST-----"))
    refuse('csr must be PEM ("-----BEGIN CERTIFICATE REQUEST-----")');
  let csr: x509.Pkcs10CertificateRequest;
  try {
    csr = new x509.Pkcs10CertificateRequest(pem);
  } catch {
    return refuse("csr could not be parsed as a PKCS#10 certificate request");
  }
  let key: nodeCrypto.KeyObject;
  try {
    key = nodeCrypto.createPublicKey({
      key: Buffer.from(csr.publicKey.rawData),
      format: "der",
      type: "spki",
    });
  } catch {
    return refuse("the csr's public key could not be read");
  }
  const keyAlgorithm = keyAlgorithmOf(key);
  if (!keyAlgorithm) {
    const details = key.asymmetricKeyDetails?.namedCurve
      ? ` (${key.asymmetricKeyDetails.namedCurve})`
      : "";
    refuse(
      `the csr's key is ` +
        `${key.asymmetricKeyType ?? "of an unknown type"}${details}; only ECDSA ` +
        `P-256 and Ed25519 keys are accepted`,
    );
  }
  let signed = false;
  try {
    signed = await csr.verify();
  } catch {
    signed = false;
  }
  if (!signed)
    refuse(
      "the csr's signature does not verify with its public key; make the request with the key it names",
    );
  return {
    publicKeyPem: key.export({ type: "spki", format: "pem" }).toString(),
    keyAlgorithm: keyAlgorithm!,
  };
}

function keyAlgorithmOf(key: nodeCrypto.KeyObject): VerifiedCsr["keyAlgorithm"] | undefined {
  if (key.asymmetricKeyType === "ed25519") return "Ed25519";
  if (key.asymmetricKeyType === "ec" && key.asymmetricKeyDetails?.namedCurve === "prime256v1")
    return "P-256";
  return undefined;
}
