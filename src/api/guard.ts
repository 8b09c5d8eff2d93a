import { Code, ConnectError, createContextKey, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import type { DescMethod, DescService } from "@bufbuild/protobuf";
import { checkValidityNow } from "../identity/certificate-policy.js";
import { runnerPathShape, type Principal } from "../identity/principal.js";
import type { AuditRecord, AuditSink } from "../identity/audit.js";
import { principalKey, requestIdentityKey } from "./context.js";
import { checkRequestMessage } from "./request-rules.js";
import { routeOf, type RoutePrincipal } from "./routes.js";

/** What the guard needs to decide who may call what. */
export interface GuardOptions {
  readonly trustDomain: string;
  /** SPIFFE IDs granted the admin routes. */
  readonly admins: ReadonlySet<string>;
  readonly audit: AuditSink;
  /** Resolves to a reason when the runner is retired; checked on every request. */
  readonly runnerRefusal?: (runner: Extract<Principal, { kind: "runner" }>) => string | undefined;
}

/**
 * Wraps every method of a service implementation with the per-request policy:
 * certificate verdict, validity now, the route's principal kind, then the
 * request message rules. Both surfaces (Connect and REST) call the wrapped
 * implementation, so neither can skip a check. Every decision is audited.
 */
export function guardService<S extends DescService>(service: S, impl: ServiceImpl<S>, options: GuardOptions): ServiceImpl<S> {
  const guarded: Record<string, unknown> = {};
  for (const method of service.methods) {
    const fn = (impl as Record<string, unknown>)[method.localName] as (...args: unknown[]) => unknown;
    if (typeof fn !== "function") throw new Error(`${service.typeName}.${method.name} has no implementation`);
    const admit = (ctx: HandlerContext) => authorizeOnce(ctx, options);
    switch (method.methodKind) {
      case "unary":
        guarded[method.localName] = async (req: object, ctx: HandlerContext) => {
          checkRequestMessage(method.input, req, admit(ctx));
          return fn.call(impl, req, ctx);
        };
        break;
      case "server_streaming":
        guarded[method.localName] = async function* (req: object, ctx: HandlerContext) {
          checkRequestMessage(method.input, req, admit(ctx));
          yield* fn.call(impl, req, ctx) as AsyncIterable<unknown>;
        };
        break;
      default:
        // Streamed requests: each message is checked by the handler as it arrives.
        guarded[method.localName] = async (reqs: AsyncIterable<object>, ctx: HandlerContext) => {
          admit(ctx);
          return fn.call(impl, reqs, ctx);
        };
    }
  }
  return guarded as ServiceImpl<S>;
}

const authorizedKey = createContextKey<{ readonly principal: Principal | undefined } | undefined>(undefined, { description: "authorization done" });

/**
 * Authorizes the request of `ctx` once: the REST router calls it before it
 * reads a body (so an unauthenticated client learns nothing from parsing and
 * is audited), and the guarded handler's own call then returns the same
 * answer without a second decision or audit record.
 */
export function authorizeOnce(ctx: HandlerContext, options: GuardOptions): Principal | undefined {
  const done = ctx.values.get(authorizedKey);
  if (done) return done.principal;
  const principal = authorize(ctx, ctx.method, routeOf(ctx.method).principal as RoutePrincipal, options);
  ctx.values.set(authorizedKey, { principal });
  return principal;
}

function authorize(ctx: HandlerContext, method: DescMethod, kind: RoutePrincipal, options: GuardOptions): Principal | undefined {
  const identity = ctx.values.get(requestIdentityKey);
  const verdict = identity?.verdict;
  const route = `${ctx.requestMethod} ${new URL(ctx.url).pathname}`;
  const base = {
    route,
    ...(identity?.remoteAddress ? { remoteAddress: identity.remoteAddress } : {}),
    ...(verdict?.facts ? { certificate: verdict.facts } : {}),
  };
  const decide = (decision: AuditRecord["decision"], reason: string) => options.audit.record({ at: new Date(), decision, reason, ...base });
  if (kind === "none") {
    decide("allow", `${method.name} needs no client certificate`);
    return undefined;
  }
  const deny = (code: Code, reason: string): never => {
    decide("deny", reason);
    throw new ConnectError(reason, code);
  };
  if (!verdict) return deny(Code.Unauthenticated, "no client certificate was presented; connect with a runner certificate");
  if (!verdict.ok) return deny(Code.Unauthenticated, verdict.reason);
  const expired = checkValidityNow(verdict.facts, new Date());
  if (expired) return deny(Code.Unauthenticated, expired);
  const principal = verdict.principal;
  const id = principal.spiffeId.text;
  if (kind === "runner") {
    if (principal.kind !== "runner") {
      return deny(Code.PermissionDenied, `runner routes need a SPIFFE ID of the form spiffe://${options.trustDomain}${runnerPathShape}; this certificate's is ${id}`);
    }
    const refusal = options.runnerRefusal?.(principal);
    if (refusal) return deny(Code.PermissionDenied, refusal);
  } else if (!options.admins.has(id)) {
    return deny(Code.PermissionDenied, `${id} is not granted the admin routes; start forelead serve with --admin ${id} to grant it`);
  }
  decide("allow", `${kind} ${id}`);
  ctx.values.set(principalKey, principal);
  return principal;
}
