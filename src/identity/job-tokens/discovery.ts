import { jobTokenAlg, type JobTokenKeys } from "./key-set.js";

/** Where the two documents live under the issuer URL. */
export const discoveryPaths = {
  configuration: "/.well-known/openid-configuration",
  jwks: "/.well-known/jwks.json",
} as const;

/** The issuer's public documents, as JSON text. */
export interface DiscoveryDocuments {
  /** OpenID Connect Discovery 1.0: the issuer, its jwks_uri and what it signs. */
  readonly configuration: string;
  /** The JWKS: the signing key and retired keys whose tokens may not have expired yet. */
  readonly jwks: string;
}

/**
 * The discovery document and JWKS of the issuer `issuerUrl` at `now`: what `serve
 * --job-token-listen` answers and `forelead job-token publish` writes as files.
 */
export function discoveryDocuments(
  issuerUrl: string,
  keys: JobTokenKeys,
  now: Date,
): DiscoveryDocuments {
  const configuration = {
    issuer: issuerUrl,
    jwks_uri: `${issuerUrl.replace(/\/$/, "")}${discoveryPaths.jwks}`,
    response_types_supported: ["id_token"],
    subject_types_supported: ["public"],
    id_token_signing_alg_values_supported: [jobTokenAlg],
    scopes_supported: ["openid"],
    claims_supported: [
      "iss",
      "sub",
      "aud",
      "exp",
      "iat",
      "nbf",
      "jti",
      "workspace",
      "job_id",
      "attempt",
      "runner_id",
      "pipeline_id",
      "pipeline",
      "step",
      "repository",
      "ref",
      "enqueued_by",
    ],
  };
  return {
    configuration: JSON.stringify(configuration),
    jwks: JSON.stringify(keys.publicKeys(now)),
  };
}
