import {
  Code,
  ConnectError,
  createContextKey,
  type HandlerContext,
  type MethodImplSpec,
  type ServiceImplSpec,
} from "@connectrpc/connect";
import type { DescMessage, DescMethod } from "@bufbuild/protobuf";
import { checkValidityNow } from "../identity/certificate-policy.js";
import { runnerPathShape, type Principal } from "../identity/principal.js";
import type { AuditRecord, AuditSink } from "../identity/audit.js";
import type { JobOwnership } from "../broker/jobs/workspace.js";
import { mayActOnJob, type IdentityRoles, type RoleTable } from "../identity/roles.js";
import type { SessionLookup } from "../identity/sessions.js";
import { parseSpiffeId } from "../identity/spiffe.js";
import { principalOf } from "../identity/principal.js";
import { actionAuditorKey } from "./audit-actions.js";
import {
  callerRolesKey,
  calledMethodKey,
  jobReaderKey,
  principalKey,
  requestIdentityKey,
} from "./context.js";
import { checkRequestMessage } from "./request-rules.js";
import { transportFacts } from "../protocol/transport-facts.js";
import { requestPath } from "./rest/index.js";
import { checkRequestText } from "../protocol/text-rules.js";
import { mapMessages } from "../streams/batches.js";
import { batchField, checkedRole, routeOf, type RoutePrincipal, type RouteRole } from "./routes.js";

/** What the guard needs to decide who may call what. */
export interface GuardOptions {
  readonly trustDomain: string;
  /** The roles granted to service identities (`--admin`, `--grant`). */
  readonly roles: RoleTable;
  readonly audit: AuditSink;
  /**
   * A reason when the runner is refused (retired); synchronous and cheap: it runs on every request.
   */
  readonly runnerRefusal?: (runner: Extract<Principal, { kind: "runner" }>) => string | undefined;
  /**
   * The workspace and enqueuer of a job, for scoped roles on methods that name a job rather than a
   * workspace.
   */
  readonly jobOwnership: (jobId: string) => Promise<JobOwnership | undefined>;
  /** Told of every refusal, once per request, by its kind (metrics); cheap and synchronous. */
  readonly onRefusal?: (reason: RefusalReason) => void;
  /**
   * The live person session a delegate's credential opens (src/identity/sessions.ts); unset when
   * single sign-on is not configured, and then a delegate can act for nobody.
   */
  readonly findSession?: (credential: string, delegate: string) => Promise<SessionLookup>;
}

/** The header in which a delegate sends the session credential of the person it acts for. */
const onBehalfOfHeader = "forelead-on-behalf-of";

/** Why the guard refused a request, as a closed set (the audit record holds the full text). */
export const refusalReasons = [
  "audit_unavailable",
  "no_certificate",
  "certificate_rejected",
  "certificate_expired",
  "not_a_runner",
  "runner_refused",
  "runner_on_admin_route",
  "no_role",
  "missing_role",
  "workspace_scope",
  "no_session",
  "session_refused",
] as const;

/** One of refusalReasons. */
export type RefusalReason = (typeof refusalReasons)[number];

/**
 * Wraps every method of a service implementation with the per-request policy:
 * certificate verdict, validity now, the route's principal kind, the role an
 * admin method declares (scoped to the request's workspace or job for
 * workspace-scoped roles, see `decideScope`),
 * then the request message rules. Both surfaces (Connect and REST) call the
 * wrapped implementation, so neither can skip a check. Every decision is
 * audited, once; admitted requests get an action auditor for what they do.
 */
export function guardService(spec: ServiceImplSpec, options: GuardOptions): ServiceImplSpec {
  const methods: Record<string, MethodImplSpec> = {};
  for (const method of spec.service.methods) {
    const impl = spec.methods[method.localName];
    if (!impl) throw new Error(`${spec.service.typeName}.${method.name} has no implementation`);
    ruleOf(method); // a method without a valid role declaration fails here, at start-up
    methods[method.localName] = guardMethod(impl, options);
  }
  return { service: spec.service, methods };
}

function guardMethod(spec: MethodImplSpec, options: GuardOptions): MethodImplSpec {
  // The context, once the caller is admitted and (given a request message) the message passes the
  // rules.
  const admitted = async (ctx: HandlerContext, req?: object): Promise<HandlerContext> => {
    let admission = authorizeOnce(ctx, options);
    if (admission.pendingDelegation)
      admission = await actForPerson(ctx, admission.pendingDelegation, options);
    // before anything (the scope's audit record) reads it
    if (req) checkRequestText(spec.method.input, req);
    if (admission.pendingScope) await decideScope(ctx, admission.pendingScope, req, options);
    if (req) checkRequestMessage(spec.method.input, req, admission.principal);
    return ctx;
  };
  // Streamed requests: each message passes the text rules as it arrives; the handler checks the
  // rest.
  switch (spec.kind) {
    case "unary": {
      const { method, impl } = spec;
      return {
        kind: "unary",
        method,
        impl: async (req, ctx) => impl(req, await admitted(ctx, req)),
      };
    }
    case "server_streaming": {
      const { method, impl } = spec;
      return {
        kind: "server_streaming",
        method,
        impl: async function* (req, ctx) {
          yield* impl(req, await admitted(ctx, req));
        },
      };
    }
    case "client_streaming": {
      const { method, impl } = spec;
      return {
        kind: "client_streaming",
        method,
        impl: async (reqs, ctx) => impl(textChecked(method.input, reqs), await admitted(ctx)),
      };
    }
    case "bidi_streaming": {
      const { method, impl } = spec;
      return {
        kind: "bidi_streaming",
        method,
        impl: async function* (reqs, ctx) {
          yield* impl(textChecked(method.input, reqs), await admitted(ctx));
        },
      };
    }
  }
}

/**
 * Streamed request messages, each through the text rules before the handler
 * sees it; the first that breaks one ends the stream with the refusal, named
 * by its NDJSON line (REST) or its position (generated clients), like a line
 * that is not JSON. Batches stay batches (streams/batches.ts).
 */
function textChecked<T extends object>(
  schema: DescMessage,
  reqs: AsyncIterable<T>,
): AsyncIterable<T> {
  let n = 0;
  return mapMessages(reqs, (req) => {
    n++;
    const { textChecked, line } = transportFacts(req);
    if (textChecked) return req; // the flat decoder's lines: no "line N" text built for nothing
    checkRequestText(schema, req, `${line === undefined ? `message ${n}` : `line ${line}`}: `);
    return req;
  });
}

/** How one method is admitted: who may call it and, on admin routes, with which role. */
interface MethodRule {
  readonly kind: RoutePrincipal;
  readonly role: RouteRole | undefined;
}

const rules = new WeakMap<DescMethod, MethodRule>();

function ruleOf(method: DescMethod): MethodRule {
  let rule = rules.get(method);
  if (!rule) {
    const option = routeOf(method);
    rule = {
      kind: option.principal as RoutePrincipal,
      role: checkedRole(method.parent, method, option),
    };
    rules.set(method, rule);
  }
  return rule;
}

/**
 * The outcome of the identity checks. `pendingScope` is set when the caller
 * holds only workspace-scoped roles: the decision then waits for the request
 * message, which names the workspace (or the job whose workspace and
 * enqueuer count).
 */
export interface Admission {
  readonly principal: Principal | undefined;
  readonly pendingScope?: PendingScope;
  /**
   * Set when the caller is a delegate on a method other than its own (SessionService): the
   * decision waits for the request's headers, which carry the person's session credential, and
   * is then made with the person's roles.
   */
  readonly pendingDelegation?: PendingDelegation;
}

interface PendingDelegation {
  readonly delegate: Principal;
  readonly rule: MethodRule;
  readonly base: AuditBase;
}

/** What every audit record of one request says of the request. */
type AuditBase = Pick<
  AuditRecord,
  "route" | "remoteAddress" | "certificate" | "spiffeId" | "delegate" | "personClaim"
>;

interface PendingScope {
  readonly id: string;
  readonly role: "read" | "enqueue";
  readonly roles: IdentityRoles;
  readonly decide: (decision: AuditRecord["decision"], reason: string) => void;
}

const noRoles: IdentityRoles = {
  admin: false,
  read: false,
  readWorkspaces: new Set(),
  enqueue: new Set(),
  delegate: false,
};

const admissionKey = createContextKey<Admission | ConnectError | undefined>(undefined, {
  description: "authorization done",
});

/**
 * Authorizes the request of `ctx` once: the REST router and, for Connect and
 * gRPC calls, the server call it before a body is read (so an unauthenticated
 * client learns nothing from parsing and is audited), and the guarded
 * handler's own call then returns the same answer, or throws the same
 * refusal, without a second decision or audit record.
 */
export function authorizeOnce(ctx: HandlerContext, options: GuardOptions): Admission {
  const done = ctx.values.get(admissionKey);
  if (done instanceof ConnectError) throw done;
  if (done) return done;
  ctx.values.set(calledMethodKey, ctx.method);
  let admission: Admission;
  try {
    admission = authorize(ctx, ctx.method, ruleOf(ctx.method), options);
  } catch (err) {
    if (err instanceof ConnectError) ctx.values.set(admissionKey, err);
    throw err;
  }
  ctx.values.set(admissionKey, admission);
  return admission;
}

function authorize(
  ctx: HandlerContext,
  method: DescMethod,
  rule: MethodRule,
  options: GuardOptions,
): Admission {
  const identity = ctx.values.get(requestIdentityKey);
  const verdict = identity?.verdict;
  const base: AuditBase = {
    route: `${ctx.requestMethod} ${requestPath(ctx)}`,
    remoteAddress: identity?.remoteAddress || undefined,
    certificate: verdict?.facts,
  };
  const { admitted, deny } = decisions(ctx, base, options);
  // Fail closed: a decision that cannot be recorded is not made (the refusal itself waits in
  // memory, aggregated).
  const unrecordable = options.audit.unavailable();
  if (unrecordable) return deny(Code.Unavailable, unrecordable, "audit_unavailable");
  if (rule.kind === "none")
    return admitted(undefined, `${method.name} needs no client certificate`);
  if (!verdict)
    return deny(
      Code.Unauthenticated,
      "no client certificate was presented; connect with a runner certificate",
      "no_certificate",
    );
  if (!verdict.ok) return deny(Code.Unauthenticated, verdict.reason, "certificate_rejected");
  const expired = checkValidityNow(verdict.facts, new Date());
  if (expired) return deny(Code.Unauthenticated, expired, "certificate_expired");
  const principal = verdict.principal;
  const id = principal.spiffeId.text;
  if (rule.kind === "runner") {
    if (principal.kind !== "runner") {
      return deny(
        Code.PermissionDenied,
        `runner routes need a SPIFFE ID of the form ` +
          `spiffe://${options.trustDomain}${runnerPathShape}; this certificate's ` +
          `is ${id}`,
        "not_a_runner",
      );
    }
    const refusal = options.runnerRefusal?.(principal);
    if (refusal) return deny(Code.PermissionDenied, refusal, "runner_refused");
    return admitted(principal, `runner ${id}`);
  }
  // Admin routes. A runner identity never gets here, whatever the configuration says.
  if (principal.kind === "runner") {
    return deny(
      Code.PermissionDenied,
      `${method.name} is an admin method; runner identities (${id}) can never call admin methods`,
      "runner_on_admin_route",
    );
  }
  const roles = options.roles.of(id);
  // A delegate acts for people on every method but its own ("delegate") and what it reports about
  // itself ("granted").
  if (roles?.delegate && rule.role !== "delegate" && rule.role !== "granted")
    return { principal: undefined, pendingDelegation: { delegate: principal, rule, base } };
  return decideRoles(ctx, rule, principal, roles, base, options);
}

/** The allow and deny of one request, each audited with `base`. */
function decisions(ctx: HandlerContext, base: AuditBase, options: GuardOptions) {
  const decide = (decision: AuditRecord["decision"], reason: string) =>
    options.audit.record({ at: new Date(), decision, reason, ...base });
  const admitted = (principal: Principal | undefined, reason: string | undefined): Admission => {
    if (reason !== undefined) decide("allow", reason);
    ctx.values.set(actionAuditorKey, {
      record: (e) =>
        options.audit.record({
          at: new Date(),
          kind: "action",
          ...base,
          action: e.action,
          target: e.target,
          decision: e.decision,
          reason: e.reason,
          // An action names whom it was done for when it says so; else the caller (for a
          // delegate's call, the person), never a blank that the certificate's identity fills.
          spiffeId: e.spiffeId || base.spiffeId,
        }),
    });
    if (principal) ctx.values.set(principalKey, principal);
    return { principal };
  };
  const deny = (code: Code, reason: string, why: RefusalReason): never => {
    decide("deny", reason);
    options.onRefusal?.(why);
    throw new ConnectError(reason, code);
  };
  return { decide, admitted, deny };
}

/**
 * The decision by the roles of an admin method's caller: a service, or a person a delegate acts
 * for (its roles then are the person's own and its groups').
 */
function decideRoles(
  ctx: HandlerContext,
  rule: MethodRule,
  principal: Principal,
  roles: IdentityRoles | undefined,
  base: AuditBase,
  options: GuardOptions,
): Admission {
  const { admitted, deny, decide } = decisions(ctx, base, options);
  ctx.values.set(callerRolesKey, roles);
  const method = ctx.method;
  const id = principal.spiffeId.text;
  const role = rule.role!;
  const hint = role === "enqueue" ? `${id}=enqueue:WORKSPACE` : `${id}=${role}`;
  if (role === "delegate")
    return roles?.delegate
      ? admitted(principal, `delegate ${id}`)
      : deny(
          Code.PermissionDenied,
          `${method.name} is for delegates (an identity that acts for people signed in by ` +
            `single sign-on); ${id} is not one (start forelead serve with --grant ${hint})`,
          "missing_role",
        );
  if (role === "granted")
    return roles
      ? admitted(principal, `granted ${id}`)
      : deny(
          Code.PermissionDenied,
          `${id} is granted no role; ${method.name} is for any identity granted one (start ` +
            `forelead serve with --grant ${id}=read, for example)`,
          "no_role",
        );
  // The enqueuer's right to its own jobs holds whatever its grants are now, even none.
  const namesJob = method.input.fields.some((f) => ownedIdFields.includes(f.name));
  if (!roles && !namesJob)
    return deny(
      Code.PermissionDenied,
      `${id} is granted no role; ${method.name} needs the "${role}" role (start forelead serve with --grant ${hint})`,
      "no_role",
    );
  if (roles?.admin) return admitted(principal, `admin ${id}`);
  if (role === "read" && roles?.read) return admitted(principal, `read ${id}`);
  // Workspace-scoped roles (an enqueuer may list its own jobs): decided (and audited) once the
  // request message names the workspace or the job.
  const scoped =
    role === "read"
      ? (roles?.readWorkspaces.size ?? 0) + (roles?.enqueue.size ?? 0) > 0
      : role === "enqueue" && (roles?.enqueue.size ?? 0) > 0;
  if (role === "admin" || (!scoped && !namesJob))
    return deny(Code.PermissionDenied, lacks(id, role, method.name, hint), "missing_role");
  return {
    ...admitted(principal, undefined),
    pendingScope: { id, role, roles: roles ?? noRoles, decide },
  };
}

/**
 * A delegate's call, decided as the person whose session credential it sends: the session must be
 * this delegate's, live and not ended; the person's roles then decide, and every record of the
 * request names the person (spiffeId), its claim and the delegate. A delegate without a session
 * can do nothing. The credential is never quoted.
 */
async function actForPerson(
  ctx: HandlerContext,
  pending: PendingDelegation,
  options: GuardOptions,
): Promise<Admission> {
  const delegate = pending.delegate.spiffeId.text;
  const { deny } = decisions(ctx, pending.base, options);
  let admission: Admission;
  try {
    const credential = ctx.requestHeader.get(onBehalfOfHeader);
    if (!credential)
      deny(
        Code.PermissionDenied,
        `${delegate} is a delegate: it has no power of its own and acts only for a person ` +
          `signed in by single sign-on; open a session (SessionService.CreateSession) and send ` +
          `its credential in the ${onBehalfOfHeader} header`,
        "no_session",
      );
    if (!options.findSession)
      deny(
        Code.PermissionDenied,
        `${delegate} is a delegate, but single sign-on is not configured (serve --sso-issuer)`,
        "no_session",
      );
    const found = await options.findSession!(credential!, delegate);
    if (!found.ok)
      deny(
        Code.Unauthenticated,
        `${found.reason}; ${delegate} may act only for a person signed in through it now ` +
          `(sign in again)`,
        "session_refused",
      );
    const { person, groups } = (found as Extract<SessionLookup, { ok: true }>).session;
    const base: AuditBase = {
      ...pending.base,
      spiffeId: person.spiffeId,
      delegate,
      personClaim: person.claim,
    };
    const principal = principalOf(parseSpiffeId(person.spiffeId));
    admission = decideRoles(
      ctx,
      pending.rule,
      principal,
      options.roles.ofPerson(person.spiffeId, groups),
      base,
      options,
    );
  } catch (err) {
    if (err instanceof ConnectError) ctx.values.set(admissionKey, err);
    throw err;
  }
  ctx.values.set(admissionKey, admission);
  return admission;
}

function lacks(id: string, role: RouteRole, method: string, hint: string, why = ""): string {
  return `${id} lacks the "${role}" role that ${method} needs${why} (start forelead serve with --grant ${hint})`;
}

/**
 * Finishes the decision for an identity without admin or (on read methods)
 * the global read role. One place decides every scoped method:
 * - a request naming a workspace (workspace_id) is allowed when the role's
 *   workspaces hold it (`read:`/`enqueue:`); a job listing naming none shows
 *   the reader's workspaces and its own jobs (`jobReaderKey`), other read
 *   listings naming none are refused naming the workspaces to ask for;
 * - a request naming a job (job_id) is allowed to the identity that enqueued
 *   the job, on read methods to a reader of the job's workspace, and on the
 *   `workspaceActs` to an enqueuer of its workspace; cancelling another
 *   identity's job takes admin;
 * - a method naming neither (the audit trail), or listed in `everyWorkspace`,
 *   needs the global role.
 * An empty or unknown workspace or job is let through to the handler, which
 * refuses it as invalid or not found. Refusals name the identity, the
 * workspace and the grant that would allow the call.
 */
async function decideScope(
  ctx: HandlerContext,
  scope: PendingScope,
  req: object | undefined,
  options: GuardOptions,
): Promise<void> {
  const { id, role, roles } = scope;
  const method = ctx.method;
  const values = req as Record<string, unknown> | undefined;
  const has = (name: string) =>
    values !== undefined && method.input.fields.some((f) => f.name === name);
  const allow = (reason: string) => scope.decide("allow", reason);
  const deny = (reason: string): never => {
    scope.decide("deny", reason);
    options.onRefusal?.("workspace_scope");
    throw new ConnectError(reason, Code.PermissionDenied);
  };
  const readable = roles.readWorkspaces;
  const granted = role === "read" ? readable : roles.enqueue;
  const listed = (ws: ReadonlySet<string>) => [...ws].map((w) => `"${w}"`).join(", ");
  const may =
    granted.size > 0
      ? `${id} may ${role} only in workspaces ${listed(granted)}`
      : `${id} has no "${role}" role in any workspace`;
  const batch = values && batchField(method);
  if (batch) {
    // A batch (jobs[]): every item's workspace must be granted; a refusal names each other
    // workspace and its items.
    const items = (values[batch.jsonName] as Array<Record<string, unknown>> | undefined) ?? [];
    const outside = new Map<string, number[]>();
    items.forEach((item, i) => {
      const workspace = String(item["workspaceId"] ?? "");
      if (workspace !== "" && !granted.has(workspace))
        outside.set(workspace, [...(outside.get(workspace) ?? []), i]);
    });
    const named = [...outside].slice(0, 5).map(
      ([w, at]) =>
        `workspace "${w}" (${at
          .slice(0, 5)
          .map((i) => `${batch.jsonName}[${i}]`)
          .join(", ")}${at.length > 5 ? ` and ${at.length - 5} more` : ""})`,
    );
    if (outside.size === 0)
      return allow(`${role} ${id} in the workspaces of ${items.length} ${batch.jsonName}`);
    return deny(
      `${may}, not in ` +
        `${named.join(", ")}${outside.size > 5 ? ` and ${outside.size - 5} more workspaces` : ""}; ` +
        `grant it with --grant ` +
        `${id}=${role}:${[...outside.keys()].slice(0, 5).join(",")}`,
    );
  }
  if (has("workspace_id") && !everyWorkspace.has(method.name)) {
    const workspace = String(values!["workspaceId"] ?? "");
    const jobListing = role === "read" && listsJobs(method);
    if (workspace === "" && role === "enqueue") return allow(`enqueue ${id}`);
    if (workspace === "" && jobListing) {
      ctx.values.set(jobReaderKey, { spiffeId: id, workspaces: [...readable] });
      return allow(
        `read ${id}: jobs of ${readable.size > 0 ? `workspaces ${listed(readable)} and ` : ""}the jobs it enqueued`,
      );
    }
    if (workspace === "")
      return deny(
        `${may}; name one with workspaceId, or grant every workspace with --grant ${id}=read`,
      );
    if (granted.has(workspace)) return allow(`${role} ${id} in workspace "${workspace}"`);
    if (jobListing && roles.enqueue.has(workspace)) {
      ctx.values.set(jobReaderKey, { spiffeId: id, workspaces: [] });
      return allow(`read ${id}: the jobs it enqueued in workspace "${workspace}"`);
    }
    return deny(
      `${may}, not in workspace "${workspace}"; grant it with --grant ${id}=${role}:${workspace}`,
    );
  }
  if (ownedIdFields.some(has)) {
    // A pipeline or schedule is scoped as a job is: its workspace, and the identity that submitted
    // (or created) it.
    const what = has("job_id") ? "job" : has("pipeline_id") ? "pipeline" : "schedule";
    const jobId = String(values![`${what}Id`] ?? "");
    const job = jobId ? await options.jobOwnership(jobId) : undefined;
    if (!job) return allow(`${role} ${id}`);
    if (mayActOnJob(roles, id, job.enqueuedBy)) return allow(`${id} enqueued ${what} ${jobId}`);
    if (role === "read" && readable.has(job.workspaceId))
      return allow(`read ${id} in workspace "${job.workspaceId}"`);
    if (role === "enqueue" && workspaceActs.has(method.name) && roles.enqueue.has(job.workspaceId))
      return allow(
        `enqueue ${id} in workspace "${job.workspaceId}" (${method.name} is open to the workspace)`,
      );
    if (role === "enqueue")
      return deny(
        `${id} may ${method.name.startsWith("Cancel") ? "cancel" : "act on"} ` +
          `only the ${what}s it enqueued; ${what} ${jobId} in workspace ` +
          `"${job.workspaceId}" is another identity's (only --grant ${id}=admin ` +
          `allows it)`,
      );
    return deny(
      `${may} and on the ${what}s it enqueued, not on ${what} ${jobId} in ` +
        `workspace "${job.workspaceId}"; grant it with --grant ` +
        `${id}=read:${job.workspaceId}`,
    );
  }
  return deny(lacks(id, role, method.name, `${id}=${role}`, ": it covers every workspace"));
}

/** Fields naming a row that is owned like a job (jobOwnership): a workspace and an enqueuer. */
const ownedIdFields: readonly string[] = ["job_id", "pipeline_id", "schedule_id"];

/**
 * Read methods with a workspace filter that still stay global: issued
 * certificates are the control plane's identity record, like the audit
 * trail, and belong to operators (global read) rather than to a workspace.
 */
const everyWorkspace: ReadonlySet<string> = new Set(["ListCertificates"]);

/**
 * Enqueue methods on a job that any identity granted enqueue in the job's
 * workspace may call, not only the one that enqueued it: answering a
 * suspended job's input request is an approver's act (docs/suspend.md).
 */
const workspaceActs: ReadonlySet<string> = new Set(["AnswerInput"]);

/**
 * Whether a method's reply lists jobs (a repeated forelead.runner.v1.Job): its handler applies
 * `jobReaderOf`.
 */
function listsJobs(method: DescMethod): boolean {
  return method.output.fields.some(
    (f) =>
      f.fieldKind === "list" &&
      f.listKind === "message" &&
      f.message.typeName === "forelead.runner.v1.Job",
  );
}
