/**
 * The one classification of a failed runner request: transient (retry with
 * backoff: the control plane may be restarting, the network flapping) or
 * final (no retry can cure it: the runner's configuration must change first,
 * and the runner stops at once saying what to change). Final failures carry
 * a `fix`; everything else stays transient, as before.
 */

/**
 * Where the runner's TLS material came from, named in what a final failure tells the operator to
 * fix.
 */
export interface TlsSources {
  /** e.g. "--ca /etc/forelead/ca.pem". */
  readonly ca: string;
  /** e.g. "--cert /etc/forelead/runner.pem", or "the identity in --state-dir /var/lib/forelead". */
  readonly cert: string;
}

/** Node's codes for a server certificate chain that does not verify against the CA bundle. */
const untrustedServer = new Set([
  "SELF_SIGNED_CERT_IN_CHAIN",
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "UNABLE_TO_GET_ISSUER_CERT",
  "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
  "UNABLE_TO_DECRYPT_CERT_SIGNATURE",
  "CERT_SIGNATURE_FAILURE",
  "CERT_UNTRUSTED",
  "CERT_REJECTED",
  "CERT_CHAIN_TOO_LONG",
  "INVALID_CA",
  "INVALID_PURPOSE",
]);
const outdatedServer = new Set(["CERT_HAS_EXPIRED", "CERT_NOT_YET_VALID"]);
/**
 * TLS alerts by which a server (or a proxy before it) refuses the client certificate in the
 * handshake.
 */
const refusedClient =
  /^ERR_SSL_(TLSV13_ALERT_CERTIFICATE_REQUIRED|SSLV3_ALERT_BAD_CERTIFICATE|SSLV3_ALERT_CERTIFICATE_(EXPIRED|REVOKED|UNKNOWN|UNSUPPORTED)|TLSV1_ALERT_(UNKNOWN_CA|ACCESS_DENIED))$/;

/**
 * What to fix when a request never got an HTTP answer, or undefined when
 * the failure is transient (ECONNREFUSED, ECONNRESET, a timeout, a closed
 * session). `err` is what the connection or stream reported; the TLS code
 * may sit in its cause (an HTTP/2 stream cancelled by its session's error).
 */
export function connectionFix(
  err: unknown,
  server: URL,
  sources: TlsSources | undefined,
): string | undefined {
  const failure = codeOf(err);
  if (!failure) return undefined;
  const { code, message } = failure;
  const why = `${code}: ${message}`;
  const ca = sources?.ca ?? "--ca";
  const cert = sources?.cert ?? "--cert/--key";
  if (untrustedServer.has(code)) {
    return (
      `cannot verify the control plane at ${server.origin}: its certificate is ` +
      `not signed by the CA bundle ${ca} (${why}); give --ca the CA ` +
      `certificate that signed the control plane's certificate (ca.pem in that ` +
      `control plane's certs directory)`
    );
  }
  if (outdatedServer.has(code)) {
    return (
      `the control plane at ${server.origin} presents a certificate outside ` +
      `its validity period (${why}); renew the control plane's certificate, or ` +
      `set this machine's clock right`
    );
  }
  if (code === "ERR_TLS_CERT_ALTNAME_INVALID") {
    return (
      `the control plane's certificate does not name the host ` +
      `"${server.hostname}" of --server ${server.origin} (${why}); use a ` +
      `--server host the certificate names, or reissue the certificate for ` +
      `"${server.hostname}"`
    );
  }
  if (refusedClient.test(code)) {
    return (
      `the control plane refused this runner's certificate (${cert}) in the ` +
      `TLS handshake (${why}); renew or re-enroll the runner's certificate ` +
      `from the CA the control plane trusts`
    );
  }
  // OpenSSL could not use the local files at all (a key that does not match the certificate, a PEM
  // that does not parse).
  if (code.startsWith("ERR_OSSL_")) {
    return `the TLS files cannot be used (${why}); check ${cert} (the certificate and its own key) and ${ca}`;
  }
  return undefined;
}

/** What each network error code means for a runner, and what to check. */
const unreachableAdvice: Readonly<Record<string, string>> = {
  ECONNREFUSED:
    "nothing listens there; check that the control plane is running and that --server names " +
    "its host and port",
  ENOTFOUND: "the host name does not resolve; check the host of --server",
  EAI_AGAIN: "the host name cannot be resolved now; check the host of --server and this host's DNS",
  ETIMEDOUT:
    "no answer; check the network and any firewall between this host and the control plane",
  EHOSTUNREACH: "no route to that host; check the network and the host of --server",
  ENETUNREACH: "no route to that network; check the network and the host of --server",
  ECONNRESET:
    "the connection was reset; check that --server is the control plane's own TLS port, not " +
    "a proxy or another service",
};

/**
 * A transient network failure in plain words (what happened, what to check), or undefined when
 * `err` is not one: the runner retries these, and says this each time instead of Node's stream
 * wording ("The pending stream has been canceled").
 */
export function unreachableReason(err: unknown, server: URL): string | undefined {
  const failure = codeOf(err);
  const advice = failure && unreachableAdvice[failure.code];
  return (
    advice && `cannot reach the control plane at ${server.origin} (${failure.code}): ${advice}`
  );
}

/**
 * What to fix when the control plane answered with a refusal no retry
 * changes, or undefined: 401 (the client certificate is expired, revoked or
 * from another CA), 403 (the identity may not act as this runner: retired,
 * or another workspace) and, on register, already_exists (another live
 * process holds this runner identity).
 */
export function refusalFix(
  route: string,
  status: number,
  code: string,
  message: string,
  sources: TlsSources | undefined,
): string | undefined {
  const cert = sources?.cert ?? "its certificate";
  if (status === 401)
    return `the control plane refused this runner's certificate (${cert}): ${message}; renew or re-enroll it`;
  if (status === 403) return `the control plane refuses this runner: ${message}`;
  if (code === "already_exists" && route.endsWith("/v1/runner/register")) return message;
  return undefined;
}

/**
 * What to fix before this runner can work, when `err` is a final failure; undefined when it is
 * transient (or not a request's failure at all).
 */
export function fixOf(err: unknown): string | undefined {
  const fix = err instanceof Error ? (err as { fix?: unknown }).fix : undefined;
  return typeof fix === "string" ? fix : undefined;
}

/** The first `code` along an error's cause chain, with that error's message. */
function codeOf(err: unknown): { code: string; message: string } | undefined {
  for (let e = err, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (
      typeof code === "string" &&
      code !== "ERR_HTTP2_STREAM_CANCEL" &&
      code !== "ERR_HTTP2_STREAM_ERROR"
    )
      return { code, message: e.message };
  }
  return undefined;
}
