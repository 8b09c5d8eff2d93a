// A CA's private key as operators have it on disk: PKCS#8, SEC1 EC
// (`openssl ecparam -genkey` writes it) or PKCS#1 RSA PEM, read with
// node:crypto (which takes all three) and converted to PKCS#8 for WebCrypto.
// What cannot be used is refused naming the form found and the openssl
// command that converts it.
import { createPrivateKey, type KeyObject } from "node:crypto";

/** A key the CA can sign certificates with, and the WebCrypto algorithms for it. */
export interface SigningKey {
  readonly key: KeyObject;
  /** e.g. "SEC1 EC (BEGIN EC PRIVATE KEY)", for messages. */
  readonly form: string;
  /** PKCS#8 DER, for crypto.subtle.importKey("pkcs8", ...). */
  readonly pkcs8: Buffer;
  readonly importAlgorithm:
    { name: "ECDSA"; namedCurve: "P-256" } | { name: "RSASSA-PKCS1-v1_5"; hash: "SHA-256" };
  readonly signingAlgorithm: { name: "ECDSA"; hash: "SHA-256" } | { name: "RSASSA-PKCS1-v1_5" };
}

const forms: ReadonlyArray<readonly [label: string, form: string]> = [
  ["PRIVATE KEY", "PKCS#8 (BEGIN PRIVATE KEY)"],
  ["EC PRIVATE KEY", "SEC1 EC (BEGIN EC PRIVATE KEY)"],
  ["RSA PRIVATE KEY", "PKCS#1 RSA (BEGIN RSA PRIVATE KEY)"],
  ["ENCRYPTED PRIVATE KEY", "PKCS#8 (BEGIN ENCRYPTED PRIVATE KEY)"],
];
const newP256Key =
  "`openssl ecparam -name prime256v1 -genkey -noout -out ca-key.pem` (then a new CA certificate for it)";

/**
 * Reads `pem` as a signing key for an ECDSA P-256 or RSA (2048 bits or more)
 * CA; throws with the form found and how to convert it. `what` names the key
 * in messages ("the CA key").
 */
export function readSigningKey(pem: string, what: string): SigningKey {
  const label = /-----BEGIN ([A-Z0-9 ]+)-----/.exec(pem)?.[1];
  const known = forms.find(([l]) => l === label);
  if (!known) {
    const found = label ? `a PEM "${label}"` : "no PEM block";
    throw new Error(
      `${what} holds ${found}, not a private key in PKCS#8, SEC1 EC or PKCS#1 ` +
        `RSA form; convert it with \`openssl pkey -in KEY -out ca-key.pem\``,
    );
  }
  const form = known[1];
  if (label === "ENCRYPTED PRIVATE KEY" || /^Proc-Type: *4, *ENCRYPTED/m.test(pem)) {
    throw new Error(
      `${what} is an encrypted ${form} key; forelead reads unencrypted keys ` +
        `only: decrypt it with \`openssl pkey -in KEY -out ca-key.pem\` (and ` +
        `keep the result 0600)`,
    );
  }
  let key: KeyObject;
  try {
    key = createPrivateKey(pem);
  } catch (err) {
    throw new Error(`${what} (${form}) cannot be read: ${(err as Error).message}`);
  }
  const details = key.asymmetricKeyDetails;
  const pkcs8 = key.export({ type: "pkcs8", format: "der" });
  if (key.asymmetricKeyType === "ec") {
    if (details?.namedCurve !== "prime256v1") {
      throw new Error(
        `${what} is a ${form} key on curve ` +
          `${details?.namedCurve ?? "(unknown)"}; the CA signs with ECDSA P-256 ` +
          `(prime256v1) or RSA: make a P-256 key with ${newP256Key}`,
      );
    }
    return {
      key,
      form,
      pkcs8,
      importAlgorithm: { name: "ECDSA", namedCurve: "P-256" },
      signingAlgorithm: { name: "ECDSA", hash: "SHA-256" },
    };
  }
  if (key.asymmetricKeyType === "rsa") {
    if ((details?.modulusLength ?? 0) < 2048)
      throw new Error(
        `${what} is a ${details?.modulusLength}-bit ${form} key; RSA keys need ` +
          `at least 2048 bits: \`openssl genrsa -out ca-key.pem 3072\` (then a new ` +
          `CA certificate for it)`,
      );
    return {
      key,
      form,
      pkcs8,
      importAlgorithm: { name: "RSASSA-PKCS1-v1_5", hash: "SHA-256" },
      signingAlgorithm: { name: "RSASSA-PKCS1-v1_5" },
    };
  }
  throw new Error(
    `${what} is a ${form} ${key.asymmetricKeyType} key; the CA signs with ` +
      `ECDSA P-256 or RSA: make a P-256 key with ${newP256Key}`,
  );
}
