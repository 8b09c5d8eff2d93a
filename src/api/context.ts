import { createContextKey, type HandlerContext } from "@connectrpc/connect";
import type { DescMethod } from "@bufbuild/protobuf";
import type { SessionVerdict } from "../identity/certificate-policy.js";
import type { JobReader } from "../broker/jobs/list.js";
import type { Principal } from "../identity/principal.js";
import type { IdentityRoles } from "../identity/roles.js";

/** What the transport learned about a request before any handler runs. */
export interface RequestIdentity {
  /** The per-session certificate verdict; undefined when the TLS layer gave nothing. */
  readonly verdict: SessionVerdict | undefined;
  readonly remoteAddress: string | undefined;
}

/** Set by the server for every request, on both surfaces. */
export const requestIdentityKey = createContextKey<RequestIdentity | undefined>(undefined, {
  description: "request identity",
});

/**
 * Set by the guard when it decides a request: the method called, on either surface (request metrics
 * label by it).
 */
export const calledMethodKey = createContextKey<DescMethod | undefined>(undefined, {
  description: "method called",
});

/** Set by the guard once a request is authorized. */
export const principalKey = createContextKey<Principal | undefined>(undefined, {
  description: "authorized principal",
});

/**
 * Set by the guard when an admin request is decided by roles: the caller's merged roles (a
 * person's own and its groups' when a delegate acts for it); undefined when it holds none.
 */
export const callerRolesKey = createContextKey<IdentityRoles | undefined>(undefined, {
  description: "caller's roles",
});

/** The authorized principal of a request; the guard guarantees it on runner and admin routes. */
export function principalOf(ctx: HandlerContext): Principal {
  const p = ctx.values.get(principalKey);
  if (!p) throw new Error(`${ctx.method.name}: no authorized principal (the route is not guarded)`);
  return p;
}

/** The authorized runner of a request on a runner route. */
export function runnerOf(ctx: HandlerContext): Extract<Principal, { kind: "runner" }> {
  const p = principalOf(ctx);
  if (p.kind !== "runner") throw new Error(`${ctx.method.name}: the principal is not a runner`);
  return p;
}

/**
 * Set by the guard when an identity with workspace-scoped roles lists jobs
 * without naming a workspace: the listing must show only what this reader may
 * see (its workspaces' jobs and the jobs it enqueued). Unset: no restriction.
 */
export const jobReaderKey = createContextKey<JobReader | undefined>(undefined, {
  description: "scoped job reader",
});

/** The scoped reader of a job listing, or undefined when the caller may see every job. */
export function jobReaderOf(ctx: HandlerContext): JobReader | undefined {
  return ctx.values.get(jobReaderKey);
}
