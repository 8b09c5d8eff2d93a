import { X509Certificate as NodeX509 } from "node:crypto";
import { MalformedCertificateError, readLeafFields, type LeafFields } from "./leaf-fields.js";
import { InvalidSpiffeIdError, parseSpiffeId } from "./spiffe.js";
import { principalOf, type Principal } from "./principal.js";

/**
 * The certificate policy of docs/design.md ("Identity, per request"), split in two: what can be
 * decided once per TLS session (chain, SANs, CA flag, trust domain, lifetime) and what must be
 * decided on every request, because an HTTP/2 connection can outlive its certificate (validity
 * now).
 */
export interface CertificatePolicy {
  readonly trustDomain: string;
  /** Longest allowed notAfter - notBefore, in milliseconds (defaultMaxLifetimeMs by default). */
  readonly maxLifetimeMs: number;
  /** The client trust bundle: CA certificates a client chain must end in. */
  readonly trustAnchors: readonly NodeX509[];
}

/** The longest client certificate lifetime a control plane accepts unless told otherwise. */
export const defaultMaxLifetimeMs = 24 * 3600 * 1000;

/**
 * The lifetime rule, in one place for the server that refuses a certificate and the tools that
 * write one: the reason (to follow "the certificate's") when `lifetimeMs` is over `maxMs`, else
 * undefined.
 */
export function lifetimeRefusal(lifetimeMs: number, maxMs: number): string | undefined {
  if (lifetimeMs <= maxMs) return undefined;
  return (
    `lifetime is ${formatDuration(lifetimeMs)}, over the ${formatDuration(maxMs)} maximum; ` +
    `issue a shorter-lived certificate`
  );
}

/** The client's certificate as the TLS layer read it. */
export interface PresentedLeaf {
  /** Its DER. */
  readonly raw: Buffer;
  /** Colon-separated upper-case hex, as node:tls gives it. */
  readonly fingerprint256: string;
  /** As node:tls gives them, e.g. "Nov 11 09:52:22 2029 GMT". */
  readonly validFrom: string;
  readonly validTo: string;
}

/** What the TLS layer reports about the client's certificate. */
export interface PresentedChain {
  /** The client's certificate, undefined when none was presented. */
  readonly leaf: PresentedLeaf | undefined;
  /**
   * The same certificate as node:crypto X509Certificate, its `issuerCertificate` links the
   * intermediates the client sent; read only when the chain is walked here.
   */
  readonly chain: () => NodeX509 | undefined;
  /** Node's verdict on the chain against the trust bundle (OpenSSL). */
  readonly authorized: boolean;
  readonly authorizationError?: string;
  /**
   * Whether that verdict was reached against `trustAnchors` as they are now (the handshake
   * began after the last TLS reload). Then an authorized chain is not walked again here.
   */
  readonly verdictIsCurrent?: boolean;
}

/** The facts about a client certificate an audit record carries. */
export interface CertificateFacts {
  readonly serialHex: string;
  readonly fingerprintSha256: string;
  readonly notBefore: Date;
  readonly notAfter: Date;
  /** The single URI SAN, when there is exactly one. */
  readonly uri?: string;
}

/** The per-session verdict: a principal, or the reason the certificate is refused. */
export type SessionVerdict =
  | { readonly ok: true; readonly facts: CertificateFacts; readonly principal: Principal }
  | { readonly ok: false; readonly facts?: CertificateFacts; readonly reason: string };

// OpenSSL reports these when the chain itself is sound but the time is off;
// the time is then judged by checkValidityNow, request by request.
const timeErrors = new Set(["CERT_HAS_EXPIRED", "CERT_NOT_YET_VALID"]);

/** Splits a PEM bundle into Node X509 certificates; throws naming the bundle when it holds none. */
export function parseTrustBundle(pem: string, source: string): NodeX509[] {
  const blocks = pem.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
  if (blocks.length === 0) throw new Error(`${source} holds no PEM certificate`);
  return blocks.map((b) => new NodeX509(b));
}

/** Judges a presented chain once per session. */
export function verifyPresentedChain(
  chain: PresentedChain,
  policy: CertificatePolicy,
): SessionVerdict {
  const leaf = chain.leaf;
  if (!leaf || leaf.raw.length === 0) {
    return {
      ok: false,
      reason:
        "no client certificate was presented; connect with a runner certificate (e.g. one from `forelead ca issue`)",
    };
  }
  let fields: LeafFields;
  try {
    fields = readLeafFields(leaf.raw);
  } catch (err) {
    if (!(err instanceof MalformedCertificateError)) throw err;
    return { ok: false, reason: `the client certificate could not be parsed: ${err.message}` };
  }
  const { uris } = fields;
  const facts: CertificateFacts = {
    serialHex: fields.serialHex,
    fingerprintSha256: leaf.fingerprint256.replaceAll(":", "").toLowerCase(),
    notBefore: new Date(leaf.validFrom),
    notAfter: new Date(leaf.validTo),
    uri: uris.length === 1 ? uris[0] : undefined,
  };
  const refuse = (reason: string): SessionVerdict => ({ ok: false, facts, reason });

  // OpenSSL's "authorized" against the current bundle is the verdict; our own walk is for a
  // handshake made before a reload (whose bundle may have lost the CA since) and for telling an
  // expired certificate from an untrusted one (OpenSSL's time errors can mask others).
  const chainOk =
    (chain.authorized && chain.verdictIsCurrent === true) ||
    chainVerifies(chain.chain(), policy.trustAnchors);
  const opensslOk = chain.authorized || timeErrors.has(chain.authorizationError ?? "");
  if (!chainOk || !opensslOk) {
    const detail = chain.authorizationError ? ` (${chain.authorizationError})` : "";
    return refuse(
      `the client certificate is not signed by a CA in the control plane's ` +
        `client trust bundle${detail}; use a certificate issued by that CA`,
    );
  }
  const lifetimeMs = facts.notAfter.getTime() - facts.notBefore.getTime();
  const overLong = lifetimeRefusal(lifetimeMs, policy.maxLifetimeMs);
  if (overLong) return refuse(`the client certificate's ${overLong}`);
  if (fields.ca) {
    return refuse(
      "the client certificate is a CA certificate (basicConstraints cA=true); use a leaf certificate",
    );
  }
  if (fields.signsCertificates) {
    return refuse(
      "the client certificate's key usage allows signing certificates; a SPIFFE leaf must not",
    );
  }
  if (uris.length !== 1) {
    return refuse(
      `the client certificate has ${uris.length} URI SANs; it must have exactly one, a SPIFFE ID`,
    );
  }
  let principal: Principal;
  try {
    principal = principalOf(parseSpiffeId(uris[0]!));
  } catch (err) {
    if (err instanceof InvalidSpiffeIdError)
      return refuse(`the client certificate's URI SAN: ${err.message}`);
    throw err;
  }
  if (principal.spiffeId.trustDomain !== policy.trustDomain) {
    return refuse(
      `the client certificate's trust domain ` +
        `"${principal.spiffeId.trustDomain}" is not this control plane's ` +
        `("${policy.trustDomain}")`,
    );
  }
  return { ok: true, facts, principal };
}

/** Judges validity at `now`; returns the refusal reason, or undefined when valid. */
export function checkValidityNow(facts: CertificateFacts, now: Date): string | undefined {
  if (now < facts.notBefore)
    return `the client certificate is not valid before ${facts.notBefore.toISOString()}; check the clocks or wait`;
  if (now > facts.notAfter)
    return `the client certificate expired at ${facts.notAfter.toISOString()}; renew it and reconnect`;
  return undefined;
}

/**
 * Our own walk from the leaf to a trust anchor, beside OpenSSL's: it lets an
 * expired certificate be reported as expired (not as untrusted) without ever
 * accepting an untrusted one, since OpenSSL's time errors can mask others.
 */
function chainVerifies(leaf: NodeX509 | undefined, anchors: readonly NodeX509[]): boolean {
  if (!leaf) return false;
  const now = new Date();
  const valid = (c: NodeX509) => new Date(c.validFrom) <= now && now <= new Date(c.validTo);
  const anchored = (c: NodeX509) =>
    anchors.some((a) => valid(a) && c.checkIssued(a) && c.verify(a.publicKey));
  if (anchored(leaf)) return true; // the common case: the chain is never read
  let current = leaf;
  let pool = sentIntermediates(leaf);
  for (let depth = 0; depth < 5; depth++) {
    const next = pool.find(
      (c) => c.ca && valid(c) && current.checkIssued(c) && current.verify(c.publicKey),
    );
    if (!next) return false;
    pool = pool.filter((c) => c !== next);
    current = next;
    if (anchored(current)) return true;
  }
  return false;
}

/**
 * The certificates above `leaf` in the chain the client sent (at most 10; a self-signed one ends
 * it).
 */
function sentIntermediates(leaf: NodeX509): NodeX509[] {
  const out: NodeX509[] = [];
  for (
    let c = leaf.issuerCertificate;
    c && out.length < 10 && c !== leaf && !out.includes(c) && !c.raw.equals(leaf.raw);
    c = c.issuerCertificate
  )
    out.push(c);
  return out;
}

/** Formats milliseconds as e.g. "24h", "48h30m", "90s". */
export function formatDuration(ms: number): string {
  const s = Math.round(ms / 1000);
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const sec = s % 60;
  const parts = [h ? `${h}h` : "", m ? `${m}m` : "", sec ? `${sec}s` : ""].join("");
  return parts || "0s";
}
