// oidc-provider ships no types; this is the part of its documented API the tests use.
declare module "oidc-provider" {
  import type { IncomingMessage, ServerResponse } from "node:http";
  export interface OidcAccount {
    readonly accountId: string;
    claims(): Record<string, unknown>;
  }
  export interface ProviderConfiguration {
    readonly clients?: readonly Record<string, unknown>[];
    readonly jwks?: { readonly keys: readonly object[] };
    readonly cookies?: { readonly keys: readonly string[] };
    readonly claims?: Readonly<Record<string, readonly string[]>>;
    readonly conformIdTokenClaims?: boolean;
    readonly features?: Readonly<Record<string, { readonly enabled: boolean }>>;
    readonly ttl?: Readonly<Record<string, number | (() => number)>>;
    readonly findAccount?: (ctx: unknown, id: string) => OidcAccount | Promise<OidcAccount>;
  }
  export default class Provider {
    constructor(issuer: string, configuration?: ProviderConfiguration);
    callback(): (req: IncomingMessage, res: ServerResponse) => void;
  }
}
