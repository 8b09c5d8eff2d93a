// Enrollment and renewal: a key made on the runner (it never leaves it), a
// CSR signed by it, and the certificate the control plane returns for it.
import "reflect-metadata";
import http2 from "node:http2";
import type { webcrypto } from "node:crypto";
import * as x509 from "@peculiar/x509";
import { runnerIdentityOf, type RunnerIdentity } from "./runner-identity.js";
import { saveIdentity } from "./state-dir.js";

x509.cryptoProvider.set(globalThis.crypto);

/** Where the control plane is and how to trust it. */
export interface ControlPlaneEndpoint {
  /** e.g. https://cp.example:8443 */
  readonly server: string;
  /** The CA bundle that verifies the control plane's server certificate. */
  readonly caPem: string;
}

/** Key types a runner may enroll with. */
export type RunnerKeyAlgorithm = "P-256" | "Ed25519";

/** A new key pair and a PKCS#10 request signed by it; the subject is informational only. */
export async function createKeyAndCsr(
  runnerId: string,
  algorithm: RunnerKeyAlgorithm = "P-256",
): Promise<{ keyPem: string; csrPem: string }> {
  const params =
    algorithm === "Ed25519" ? { name: "Ed25519" } : { name: "ECDSA", namedCurve: "P-256" };
  const keys = (await globalThis.crypto.subtle.generateKey(params, true, [
    "sign",
    "verify",
  ])) as webcrypto.CryptoKeyPair;
  const csr = await x509.Pkcs10CertificateRequestGenerator.create({
    name: new x509.Name([{ CN: [{ utf8String: runnerId }] }]),
    keys,
    signingAlgorithm:
      algorithm === "Ed25519" ? { name: "Ed25519" } : { name: "ECDSA", hash: "SHA-256" },
  });
  const pkcs8 = await globalThis.crypto.subtle.exportKey("pkcs8", keys.privateKey);
  return {
    keyPem: `${x509.PemConverter.encode(pkcs8, "PRIVATE KEY")}\n`,
    csrPem: `${csr.toString("pem")}\n`,
  };
}

/**
 * Enrolls: makes a key and CSR, exchanges them with the grant for a
 * certificate (POST /v1/enroll, no client certificate), and stores both in
 * `stateDir`.
 */
export async function enroll(
  endpoint: ControlPlaneEndpoint,
  opts: { grant: string; runnerId: string; stateDir: string; keyAlgorithm?: RunnerKeyAlgorithm },
): Promise<RunnerIdentity> {
  const { keyPem, csrPem } = await createKeyAndCsr(opts.runnerId, opts.keyAlgorithm);
  const reply = await postJson(endpoint, undefined, "/v1/enroll", {
    apiVersion: "v1",
    grant: opts.grant,
    runnerId: opts.runnerId,
    csr: csrPem,
  });
  const identity = identityOfReply(reply, keyPem);
  await saveIdentity(opts.stateDir, identity);
  return identity;
}

/**
 * Renews over mTLS with the current identity (POST /v1/runner/certificate) and stores the new pair.
 */
export async function renew(
  endpoint: ControlPlaneEndpoint,
  current: RunnerIdentity,
  stateDir: string,
  keyAlgorithm?: RunnerKeyAlgorithm,
): Promise<RunnerIdentity> {
  const { keyPem, csrPem } = await createKeyAndCsr(current.runnerId, keyAlgorithm);
  const reply = await postJson(endpoint, current, "/v1/runner/certificate", {
    apiVersion: "v1",
    csr: csrPem,
  });
  const identity = identityOfReply(reply, keyPem);
  if (identity.spiffeId !== current.spiffeId)
    throw new Error(
      `the renewed certificate names ${identity.spiffeId}, not ${current.spiffeId}; keeping the current one`,
    );
  await saveIdentity(stateDir, identity);
  return identity;
}

/**
 * TLS options of an HTTP/2 connection with an identity (for http2.connect or a Connect transport's
 * nodeOptions).
 */
function tlsOptions(
  endpoint: ControlPlaneEndpoint,
  identity: RunnerIdentity | undefined,
): http2.SecureClientSessionOptions {
  return {
    ca: endpoint.caPem,
    cert: identity?.certPem,
    key: identity?.keyPem,
  };
}

/**
 * POSTs JSON on a one-off connection; throws with the control plane's message on an error status.
 */
async function postJson(
  endpoint: ControlPlaneEndpoint,
  identity: RunnerIdentity | undefined,
  path: string,
  body: unknown,
): Promise<Record<string, unknown>> {
  const session = http2.connect(endpoint.server, tlsOptions(endpoint, identity));
  try {
    const { status, text } = await new Promise<{ status: number; text: string }>(
      (resolve, reject) => {
        session.once("error", reject);
        const stream = session.request({
          ":method": "POST",
          ":path": path,
          "content-type": "application/json",
        });
        let status = 0;
        const chunks: Buffer[] = [];
        stream.on("response", (h) => (status = Number(h[":status"])));
        stream.on("data", (c: Buffer) => chunks.push(c));
        stream.on("error", reject);
        stream.on("end", () => resolve({ status, text: Buffer.concat(chunks).toString("utf8") }));
        stream.end(JSON.stringify(body));
      },
    );
    let json: Record<string, unknown> = {};
    try {
      json = text ? (JSON.parse(text) as Record<string, unknown>) : {};
    } catch {
      // not JSON: reported below by status
    }
    if (status !== 200)
      throw new Error(
        `${path}: ${status} ${String(json.code ?? "")}: ${String(json.message ?? text.slice(0, 200))}`,
      );
    return json;
  } finally {
    session.close();
  }
}

/**
 * The identity the enroll or renew reply's certificate chain names, with the key its CSR was made
 * with.
 */
function identityOfReply(reply: Record<string, unknown>, keyPem: string): RunnerIdentity {
  const certPem = String(reply.certificateChain ?? "");
  if (!certPem.includes("-----BEGIN CERTIFICATE-----"))
    throw new Error("the control plane's reply holds no certificate");
  return runnerIdentityOf(certPem, keyPem);
}
