import {
  createRemoteJWKSet,
  errors as jose,
  jwtVerify,
  type JWTPayload,
  type JWTVerifyGetKey,
} from "jose";
import { personOf, type Person } from "./person.js";

/** The single sign-on provider `serve` trusts (`--sso-*` flags). */
export interface SsoOptions {
  /** The provider's issuer URL, exactly as its ID tokens' `iss` says it. */
  readonly issuer: string;
  /** The dashboard's client id: the audience of the ID tokens a delegate hands over. */
  readonly clientId?: string;
  /** The public client of `forelead login`: the audience of the ID tokens the CLI hands over. */
  readonly cliClientId?: string;
  /** The claim that names the person (default `sub`). */
  readonly identityClaim: string;
  /** The claim listing the person's groups, when groups map to roles. */
  readonly groupsClaim?: string;
}

/**
 * The provider URL of `--sso-issuer`, checked: https, or plain http only on a loopback address
 * (a provider running in a test). Every command that takes the flag checks it so.
 */
export function providerUrl(issuer: string): URL {
  let url: URL;
  try {
    url = new URL(issuer);
  } catch {
    throw new Error(`--sso-issuer ${JSON.stringify(issuer)} is not a URL`);
  }
  const loopback = ["localhost", "127.0.0.1", "[::1]"].includes(url.hostname);
  if (url.protocol !== "https:" && !(url.protocol === "http:" && loopback))
    throw new Error(
      `--sso-issuer ${issuer}: a provider must be served over https (plain http only ` +
        `on a loopback address, for tests)`,
    );
  return url;
}

/** An ID token the control plane verified. */
interface VerifiedPerson {
  readonly person: Person;
  /** The provider groups the token listed (empty without --sso-groups-claim). */
  readonly groups: readonly string[];
  /** The token's `exp`. */
  readonly expiresAt: Date;
}

/** Why an ID token was refused: a message fit for the caller and the audit trail (never the token). */
export class IdTokenRefused extends Error {}

/** What a verification must hold besides the provider's keys and issuer. */
interface IdTokenExpectations {
  /** The client the token must be issued to. */
  readonly audience: string;
  /** The nonce the client sent with the sign-in; the token must carry exactly it. */
  readonly nonce?: string;
}

/** Verifies ID tokens of one provider. */
export interface IdTokenVerifier {
  readonly options: SsoOptions;
  verify(idToken: string, expect: IdTokenExpectations): Promise<VerifiedPerson>;
}

/** Longest ID token accepted, in characters (a JWT of a few claims is well under it). */
const maxIdTokenLength = 16_384;

/**
 * A verifier of `options.issuer`'s ID tokens: the provider's discovery document names its key set
 * (fetched once, then as jose refreshes it); a token must be signed by one of those keys, name the
 * issuer exactly, be for the expected audience (and, with several audiences, authorized to it by
 * `azp`), be unexpired, and carry the expected nonce.
 */
export function createIdTokenVerifier(options: SsoOptions, trustDomain: string): IdTokenVerifier {
  let keys: Promise<JWTVerifyGetKey> | undefined;
  const keySet = () => {
    keys ??= discoverKeys(options.issuer).catch((err: unknown) => {
      keys = undefined; // a provider that was down is asked again on the next sign-in
      throw err;
    });
    return keys;
  };
  return {
    options,
    async verify(idToken, expect) {
      if (idToken === "" || idToken.length > maxIdTokenLength)
        throw new IdTokenRefused(
          idToken === "" ? "no ID token was sent" : "the ID token is too long",
        );
      let payload: JWTPayload;
      try {
        ({ payload } = await jwtVerify(idToken, await keySet(), {
          issuer: options.issuer,
          audience: expect.audience,
          requiredClaims: ["exp", "iat", "sub"],
        }));
      } catch (err) {
        throw refusal(err, options.issuer, expect.audience);
      }
      const aud = payload.aud;
      if (Array.isArray(aud) && aud.length > 1 && payload["azp"] !== expect.audience)
        throw new IdTokenRefused(
          `the ID token names several audiences and is not authorized (azp) to ${expect.audience}`,
        );
      if (expect.nonce !== undefined && payload["nonce"] !== expect.nonce)
        throw new IdTokenRefused(
          "the ID token's nonce is not the one sent with this sign-in; sign in again",
        );
      const claim = payload[options.identityClaim];
      if (typeof claim !== "string" || claim === "")
        throw new IdTokenRefused(
          `the ID token has no string claim "${options.identityClaim}" (--sso-identity-claim)`,
        );
      let person: Person;
      try {
        person = personOf(trustDomain, claim);
      } catch (err) {
        throw new IdTokenRefused(`the ID token's "${options.identityClaim}": ${String(err)}`);
      }
      return {
        person,
        groups: groupsOf(payload, options.groupsClaim),
        expiresAt: new Date(payload.exp! * 1000),
      };
    },
  };
}

/** The key set the provider's discovery document names. */
async function discoverKeys(issuer: string): Promise<JWTVerifyGetKey> {
  const url = `${issuer.replace(/\/$/, "")}/.well-known/openid-configuration`;
  let doc: { issuer?: unknown; jwks_uri?: unknown };
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(10_000) });
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
    doc = (await res.json()) as typeof doc;
  } catch (err) {
    throw new IdTokenRefused(
      `the sign-in provider's discovery document (${url}) could not be read: ${String(err)}`,
    );
  }
  if (doc.issuer !== issuer || typeof doc.jwks_uri !== "string")
    throw new IdTokenRefused(
      `the discovery document at ${url} names issuer ${JSON.stringify(doc.issuer)}, not ` +
        `${JSON.stringify(issuer)} (--sso-issuer must be the provider's issuer exactly)`,
    );
  return createRemoteJWKSet(new URL(doc.jwks_uri));
}

/** The groups claim as a list of strings (a single string counts as one group). */
function groupsOf(payload: JWTPayload, claim: string | undefined): string[] {
  if (!claim) return [];
  const value = payload[claim];
  if (typeof value === "string") return [value];
  return Array.isArray(value) ? value.filter((g): g is string => typeof g === "string") : [];
}

/** jose's verdict as a message for people; the token itself is never quoted. */
function refusal(err: unknown, issuer: string, audience: string): Error {
  if (err instanceof IdTokenRefused) return err;
  if (err instanceof jose.JWTExpired)
    return new IdTokenRefused("the ID token has expired; sign in again");
  if (err instanceof jose.JWTClaimValidationFailed) {
    const value = JSON.stringify(err.payload[err.claim]);
    if (err.claim === "iss")
      return new IdTokenRefused(
        `the ID token was issued by ${value}, not by the sign-in provider ${issuer}`,
      );
    if (err.claim === "aud")
      return new IdTokenRefused(
        `the ID token is for audience ${value}, not for this client (${audience})`,
      );
    return new IdTokenRefused(`the ID token's "${err.claim}" claim is invalid (${err.reason})`);
  }
  if (err instanceof jose.JWKSNoMatchingKey || err instanceof jose.JWSSignatureVerificationFailed)
    return new IdTokenRefused(
      `the ID token is not signed by a key of the sign-in provider ${issuer}`,
    );
  if (err instanceof jose.JOSEError)
    return new IdTokenRefused(`the ID token could not be verified (${err.code})`);
  return err instanceof Error ? err : new Error(String(err));
}
