import { createPrivateKey, X509Certificate } from "node:crypto";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";

/** A connection setting's value (a file for ca, cert and key) and where it came from. */
interface Setting {
  readonly value: string;
  readonly source: string;
}

/** The settings a TLS failure is explained with. */
export interface TlsSettings {
  readonly server: Setting;
  readonly ca: Setting;
  readonly cert: Setting;
  readonly key: Setting;
}

/**
 * The client's own certificate or key cannot be used: the fault is on this side, not the server's
 * (doctor reports it as such).
 */
export class ClientCertificateError extends Error {
  override readonly name = "ClientCertificateError";
}

const named = (s: Setting) => `${s.value} (${s.source})`;

/**
 * Checks the client's certificate and key before any connection: a file that is not a
 * certificate, an expired one, or a key of another certificate is refused naming the files and
 * the fix, instead of OpenSSL's text after a handshake.
 */
export function checkClientCertificate(
  settings: TlsSettings,
  pems: { cert: string; key: string },
  now = new Date(),
): void {
  let cert: X509Certificate;
  try {
    cert = new X509Certificate(pems.cert);
  } catch {
    throw new ClientCertificateError(
      `the client certificate ${named(settings.cert)} is not a PEM certificate; give the ` +
        `certificate file (BEGIN CERTIFICATE) as --cert`,
    );
  }
  const notAfter = new Date(cert.validTo);
  if (notAfter < now)
    throw new ClientCertificateError(
      `the client certificate ${named(settings.cert)} expired at ${notAfter.toISOString()}; ` +
        `get a new one from its CA (forelead ca issue for the development CA) and give it ` +
        `with its key as --cert and --key`,
    );
  let matches: boolean;
  try {
    matches = cert.checkPrivateKey(createPrivateKey(pems.key));
  } catch {
    throw new ClientCertificateError(
      `the key ${named(settings.key)} is not a PEM private key; give the key file made ` +
        `with ${settings.cert.value} as --key`,
    );
  }
  if (!matches)
    throw new ClientCertificateError(
      `the key ${named(settings.key)} is not the key of the certificate ` +
        `${named(settings.cert)}; give the key made with that certificate as --key`,
    );
}

/** Node's verification codes for a server certificate no CA in the bundle signed. */
const untrustedServer = new Set([
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
  "UNABLE_TO_GET_ISSUER_CERT",
  "SELF_SIGNED_CERT_IN_CHAIN",
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "CERT_SIGNATURE_FAILURE",
]);

/**
 * What a TLS failure of the connection means, in the settings' words, or undefined for any
 * other error.
 */
function describeTlsFailure(err: unknown, settings: TlsSettings): string | undefined {
  let cause: unknown = err;
  for (let i = 0; i < 4 && cause instanceof Error; i++) {
    const code = (cause as NodeJS.ErrnoException).code;
    if (code && untrustedServer.has(code))
      return (
        `the server's certificate at ${settings.server.value} is not signed by the CA in ` +
        `${named(settings.ca)}; give the CA that signed the server's certificate as --ca ` +
        `(${code})`
      );
    if (code === "CERT_HAS_EXPIRED")
      return (
        `the server's certificate at ${settings.server.value} has expired; the control ` +
        `plane's operator must renew it (forelead serve --check on its machine)`
      );
    if (code === "ERR_TLS_CERT_ALTNAME_INVALID")
      return (
        `the server's certificate is not for the host of ${settings.server.value} ` +
        `(${named(settings.server)}); use a name or address the certificate lists`
      );
    cause = cause.cause;
  }
  return undefined;
}

/** Rewrites a call's TLS failure into describeTlsFailure's words, keeping Connect's code. */
export function tlsFailureInterceptor(settings: TlsSettings): Interceptor {
  return (next) => async (req) => {
    try {
      return await next(req);
    } catch (err) {
      const described = describeTlsFailure(err, settings);
      if (!described) throw err;
      throw new ConnectError(described, Code.Unavailable, undefined, undefined, err);
    }
  };
}
