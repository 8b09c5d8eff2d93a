import { segmentProblem } from "./spiffe.js";

/**
 * A person's identity, as single sign-on proves it: `spiffe://<trust-domain>/users/<segment>`,
 * with the provider's claim kept beside it for people to read.
 *
 * The one encoding rule (docs/operations.md, "People: single sign-on and roles"): a claim that is
 * a valid SPIFFE path segment (A-Z a-z 0-9 . - _, not "." or "..") and does not begin with "_" is
 * the segment as it is; any other claim is "_" followed by the unpadded base64url of its UTF-8
 * bytes (`alice@example.com` → `_YWxpY2VAZXhhbXBsZS5jb20`). No plain segment begins with "_" and
 * every encoded one does, so the rule is reversible (personClaim) and two claims never share an ID.
 */
export interface Person {
  /** `spiffe://<trust-domain>/users/<segment>`. */
  readonly spiffeId: string;
  /** The identity claim as the provider wrote it, e.g. an email or `auth0|123`. */
  readonly claim: string;
}

/** Longest identity claim accepted, in UTF-8 bytes (its encoding stays well inside a SPIFFE ID). */
const maxClaimBytes = 256;

/** The path segment of a person whose identity claim is `claim` (see Person for the rule). */
function personSegment(claim: string): string {
  const bytes = Buffer.byteLength(claim, "utf8");
  if (bytes === 0) throw new Error("the identity claim is empty");
  if (bytes > maxClaimBytes)
    throw new Error(`the identity claim is ${bytes} bytes, over the ${maxClaimBytes}-byte limit`);
  if (!claim.startsWith("_") && segmentProblem(claim) === undefined) return claim;
  return `_${Buffer.from(claim, "utf8").toString("base64url")}`;
}

/** The identity claim a person segment stands for: personSegment read backwards. */
function personClaim(segment: string): string {
  return segment.startsWith("_")
    ? Buffer.from(segment.slice(1), "base64url").toString("utf8")
    : segment;
}

/** The person whose identity claim is `claim`, in `trustDomain`. */
export function personOf(trustDomain: string, claim: string): Person {
  return { spiffeId: `spiffe://${trustDomain}/users/${personSegment(claim)}`, claim };
}

/**
 * A SPIFFE ID for people to read: a person's (`/users/<segment>`) with its identity claim beside
 * it, e.g. `spiffe://forelead/users/_YWxp… ("alice@example.com")`; any other ID as it is.
 */
export function describeIdentity(spiffeId: string): string {
  const m = /^spiffe:\/\/[^/]+\/users\/([^/]+)$/.exec(spiffeId);
  if (!m) return spiffeId;
  const claim = personClaim(m[1]!);
  return claim === m[1] ? spiffeId : `${spiffeId} (${JSON.stringify(claim)})`;
}
