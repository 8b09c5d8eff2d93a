import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import type { DescMethod, DescService } from "@bufbuild/protobuf";
import { checkValidityNow } from "../identity/certificate-policy.js";
import { runnerPathShape, type Principal } from "../identity/principal.js";
import type { AuditRecord, AuditSink } from "../identity/audit.js";
import type { RoleName, RoleTable } from "../identity/roles.js";
import { actionAuditorKey } from "./audit-actions.js";
import { principalKey, requestIdentityKey } from "./context.js";
import { checkRequestMessage } from "./request-rules.js";
import { checkedRole, routeOf, type RoutePrincipal } from "./routes.js";

/** What the guard needs to decide who may call what. */
export interface GuardOptions {
  readonly trustDomain: string;
  /** The roles granted to service identities (`--admin`, `--grant`). */
  readonly roles: RoleTable;
  readonly audit: AuditSink;
  /** A reason when the runner is refused (retired); synchronous and cheap: it runs on every request. */
  readonly runnerRefusal?: (runner: Extract<Principal, { kind: "runner" }>) => string | undefined;
  /** The workspace of a job, for "enqueue" methods that name a job rather than a workspace. */
  readonly jobWorkspace: (jobId: string) => Promise<string | undefined>;
}

/** How one method is admitted: who may call it and, on admin routes, with which role. */
interface MethodRule {
  readonly kind: RoutePrincipal;
  readonly role: RoleName | undefined;
}

/**
 * Wraps every method of a service implementation with the per-request policy:
 * certificate verdict, validity now, the route's principal kind, the role an
 * admin method declares (scoped to the request's workspace for "enqueue"),
 * then the request message rules. Both surfaces (Connect and REST) call the
 * wrapped implementation, so neither can skip a check. Every decision is
 * audited; admitted requests get an action auditor for what they then do.
 */
export function guardService<S extends DescService>(service: S, impl: ServiceImpl<S>, options: GuardOptions): ServiceImpl<S> {
  const guarded: Record<string, unknown> = {};
  for (const method of service.methods) {
    const fn = (impl as Record<string, unknown>)[method.localName] as (...args: unknown[]) => unknown;
    if (typeof fn !== "function") throw new Error(`${service.typeName}.${method.name} has no implementation`);
    const option = routeOf(method);
    const rule: MethodRule = { kind: option.principal as RoutePrincipal, role: checkedRole(service, method, option) };
    const admit = (ctx: HandlerContext, req?: object) => authorize(ctx, method, rule, options, req);
    switch (method.methodKind) {
      case "unary":
        guarded[method.localName] = async (req: object, ctx: HandlerContext) => {
          checkRequestMessage(method.input, req, await admit(ctx, req));
          return fn.call(impl, req, ctx);
        };
        break;
      case "server_streaming":
        guarded[method.localName] = async function* (req: object, ctx: HandlerContext) {
          checkRequestMessage(method.input, req, await admit(ctx, req));
          yield* fn.call(impl, req, ctx) as AsyncIterable<unknown>;
        };
        break;
      default:
        // Streamed requests: each message is checked by the handler as it arrives.
        guarded[method.localName] = async (reqs: AsyncIterable<object>, ctx: HandlerContext) => {
          await admit(ctx);
          return fn.call(impl, reqs, ctx);
        };
    }
  }
  return guarded as ServiceImpl<S>;
}

async function authorize(ctx: HandlerContext, method: DescMethod, rule: MethodRule, options: GuardOptions, req: object | undefined): Promise<Principal | undefined> {
  const identity = ctx.values.get(requestIdentityKey);
  const verdict = identity?.verdict;
  const route = `${ctx.requestMethod} ${new URL(ctx.url).pathname}`;
  const base = {
    route,
    ...(identity?.remoteAddress ? { remoteAddress: identity.remoteAddress } : {}),
    ...(verdict?.facts ? { certificate: verdict.facts } : {}),
  };
  const decide = (decision: AuditRecord["decision"], reason: string) => options.audit.record({ at: new Date(), decision, reason, ...base });
  const admitted = (principal: Principal | undefined, reason: string) => {
    decide("allow", reason);
    ctx.values.set(actionAuditorKey, {
      record: (e) => options.audit.record({ at: new Date(), kind: "action", ...base, action: e.action, target: e.target, decision: e.decision, reason: e.reason, ...(e.spiffeId ? { spiffeId: e.spiffeId } : {}) }),
    });
    if (principal) ctx.values.set(principalKey, principal);
    return principal;
  };
  if (rule.kind === "none") return admitted(undefined, `${method.name} needs no client certificate`);
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
  if (rule.kind === "runner") {
    if (principal.kind !== "runner") {
      return deny(Code.PermissionDenied, `runner routes need a SPIFFE ID of the form spiffe://${options.trustDomain}${runnerPathShape}; this certificate's is ${id}`);
    }
    const refusal = options.runnerRefusal?.(principal);
    if (refusal) return deny(Code.PermissionDenied, refusal);
    return admitted(principal, `runner ${id}`);
  }
  // Admin routes. A runner identity never gets here, whatever the configuration says.
  if (principal.kind === "runner") {
    return deny(Code.PermissionDenied, `${method.name} is an admin method; runner identities (${id}) can never call admin methods`);
  }
  const roles = options.roles.of(id);
  const role = rule.role!;
  const hint = role === "enqueue" ? `${id}=enqueue:WORKSPACE` : `${id}=${role}`;
  if (!roles) return deny(Code.PermissionDenied, `${id} is granted no role; ${method.name} needs the "${role}" role (start forelead serve with --grant ${hint})`);
  if (roles.admin) return admitted(principal, `admin ${id}`);
  if (role === "read" && roles.read) return admitted(principal, `read ${id}`);
  if (role === "enqueue" && roles.enqueue.size > 0) {
    const workspace = await workspaceOf(method, req, options);
    if (workspace === undefined || roles.enqueue.has(workspace)) return admitted(principal, `enqueue ${id}${workspace ? ` in workspace "${workspace}"` : ""}`);
    return deny(Code.PermissionDenied, `${id} may enqueue only in workspaces ${[...roles.enqueue].map((w) => `"${w}"`).join(", ")}, not in workspace "${workspace}"; grant it with --grant ${id}=enqueue:${workspace}`);
  }
  return deny(Code.PermissionDenied, `${id} lacks the "${role}" role that ${method.name} needs (start forelead serve with --grant ${hint})`);
}

/**
 * The workspace an "enqueue" request acts in: its workspace_id, or the
 * workspace of the job its job_id names. Undefined when it names none (an
 * empty or unknown one): the handler then refuses it as invalid or not found.
 */
async function workspaceOf(method: DescMethod, req: object | undefined, options: GuardOptions): Promise<string | undefined> {
  const values = (req ?? {}) as Record<string, unknown>;
  if (method.input.fields.some((f) => f.name === "workspace_id")) return (values["workspaceId"] as string) || undefined;
  const jobId = values["jobId"] as string;
  if (!jobId) return undefined;
  return options.jobWorkspace(jobId);
}
