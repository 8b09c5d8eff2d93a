import "reflect-metadata";
import type { webcrypto } from "node:crypto";
import * as x509 from "@peculiar/x509";
import { createRestClient, type RestReply } from "./clients.js";
import type { TestControlPlane } from "./control-plane.js";
import type { TestPki } from "./pki.js";

x509.cryptoProvider.set(globalThis.crypto);

/** Control-plane options that make the test CA the issuer of runner certificates. */
export function issuerOf(pki: TestPki): { issuer: { certPem: string; keyPem: string } } {
  return { issuer: { certPem: pki.ca.certPem, keyPem: pki.ca.keyPem } };
}

/** Key algorithms a test CSR can be made with, good and bad. */
export type CsrKey = "P-256" | "Ed25519" | "P-384" | "RSA";

/**
 * A key pair and a PKCS#10 request made in the test; `forge` signs it with a different key than the
 * one it names.
 */
export async function makeCsr(
  opts: { key?: CsrKey; forge?: boolean; sans?: x509.JsonGeneralName[] } = {},
): Promise<{ csrPem: string; keyPem: string }> {
  const key = opts.key ?? "P-256";
  const params =
    key === "Ed25519"
      ? { name: "Ed25519" }
      : key === "RSA"
        ? {
            name: "RSASSA-PKCS1-v1_5",
            hash: "SHA-256",
            modulusLength: 2048,
            publicExponent: new Uint8Array([1, 0, 1]),
          }
        : { name: "ECDSA", namedCurve: key };
  const signingAlgorithm =
    key === "Ed25519"
      ? { name: "Ed25519" }
      : key === "RSA"
        ? params
        : { name: "ECDSA", hash: key === "P-384" ? "SHA-384" : "SHA-256" };
  const gen = async () =>
    (await globalThis.crypto.subtle.generateKey(params as webcrypto.EcKeyGenParams, true, [
      "sign",
      "verify",
    ])) as webcrypto.CryptoKeyPair;
  const keys = await gen();
  const named = opts.forge ? await gen() : keys;
  const csr = await x509.Pkcs10CertificateRequestGenerator.create({
    name: "CN=test-runner",
    keys: { publicKey: named.publicKey, privateKey: keys.privateKey },
    signingAlgorithm,
    extensions: opts.sans ? [new x509.SubjectAlternativeNameExtension(opts.sans)] : [],
  });
  const pkcs8 = await globalThis.crypto.subtle.exportKey("pkcs8", named.privateKey);
  return { csrPem: csr.toString("pem"), keyPem: x509.PemConverter.encode(pkcs8, "PRIVATE KEY") };
}

/** POST /v1/enroll on a connection without a client certificate. */
export async function enrollRequest(
  cp: TestControlPlane,
  body: Record<string, unknown>,
): Promise<RestReply> {
  const rest = createRestClient(cp.url, cp.pki.ca.certPem);
  try {
    return await rest.request("POST", "/v1/enroll", { apiVersion: "v1", ...body });
  } finally {
    await rest.close();
  }
}

/** The URI SANs of a PEM certificate, parsed from the DER. */
export function uriSans(certPem: string): string[] {
  return new x509.X509Certificate(certPem)
    .getExtensions(x509.SubjectAlternativeNameExtension)
    .flatMap((e) => e.names.items.filter((n) => n.type === "url").map((n) => n.value));
}
