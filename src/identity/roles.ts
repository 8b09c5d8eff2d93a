import { parseSpiffeId } from "./spiffe.js";
import { principalOf } from "./principal.js";
import { maxSegmentIdLength, segmentIdProblem } from "./segment-id.js";

/**
 * Roles the configuration grants service identities:
 * - `admin`: every admin method;
 * - `read`: the read-only admin methods (jobs, runners, audit, certificates);
 * - `enqueue` for named workspaces: enqueue and cancel jobs there.
 */
export type RoleName = "admin" | "read" | "enqueue";

/** The role names, for messages and validation. */
export const roleNames: readonly RoleName[] = ["admin", "read", "enqueue"];

/** One role granted to one SPIFFE ID, as `--admin ID` or `--grant ID=ROLE` says. */
export interface RoleGrant {
  readonly spiffeId: string;
  readonly role: RoleName;
  /** For `enqueue`: the workspaces it covers (never empty). */
  readonly workspaces?: readonly string[];
}

/** Everything one identity was granted, merged over all its grants. */
export interface IdentityRoles {
  readonly admin: boolean;
  readonly read: boolean;
  /** Workspaces where the identity may enqueue and cancel. */
  readonly enqueue: ReadonlySet<string>;
}

/** The roles of every granted identity. */
export interface RoleTable {
  /** The merged roles of `spiffeId`, or undefined when it is granted nothing. */
  of(spiffeId: string): IdentityRoles | undefined;
  /** Every grant, for the start-up line. */
  readonly grants: readonly RoleGrant[];
}

const usage = "use --grant SPIFFE_ID=admin, --grant SPIFFE_ID=read or --grant SPIFFE_ID=enqueue:WORKSPACE[,WORKSPACE...]";

/**
 * Parses one `--grant` value: `SPIFFE_ID=admin`, `SPIFFE_ID=read` or
 * `SPIFFE_ID=enqueue:w1,w2`. Throws naming what is wrong. A SPIFFE ID cannot
 * contain "=", so the first "=" splits the identity from the role.
 */
export function parseRoleGrant(text: string, trustDomain?: string): RoleGrant {
  const eq = text.indexOf("=");
  if (eq === -1) throw new Error(`--grant ${JSON.stringify(text)} has no "="; ${usage}`);
  const spiffeId = checkServiceIdentity(text.slice(0, eq), trustDomain);
  const role = text.slice(eq + 1);
  if (role === "admin" || role === "read") return { spiffeId, role };
  if (role.startsWith("enqueue:")) {
    const workspaces = role.slice("enqueue:".length).split(",").map((w) => w.trim());
    for (const w of workspaces) {
      const problem = segmentIdProblem(w);
      if (problem) throw new Error(`--grant ${JSON.stringify(text)}: workspace ${JSON.stringify(w)} is not a valid id (${problem}); an id is 1 to ${maxSegmentIdLength} characters of A-Z a-z 0-9 . _ -`);
    }
    return { spiffeId, role: "enqueue", workspaces };
  }
  if (role === "enqueue") throw new Error(`--grant ${JSON.stringify(text)}: enqueue needs its workspaces, e.g. ${spiffeId}=enqueue:w1,w2`);
  throw new Error(`--grant ${JSON.stringify(text)}: unknown role ${JSON.stringify(role)}; ${usage}`);
}

/**
 * Checks that `id` may hold a role: a valid SPIFFE ID in the trust domain
 * (when given) that is not a runner identity, since runners never call admin
 * methods whatever the configuration says.
 */
export function checkServiceIdentity(id: string, trustDomain?: string): string {
  const parsed = parseSpiffeId(id);
  if (trustDomain !== undefined && parsed.trustDomain !== trustDomain) {
    throw new Error(`${id} is not in the trust domain "${trustDomain}"; it could never present an accepted certificate`);
  }
  if (principalOf(parsed).kind === "runner") {
    throw new Error(`${id} is a runner identity; runners never call admin methods, so it cannot be granted a role`);
  }
  return id;
}

/** Merges grants into a table; `admins` are the `--admin` IDs (role admin). */
export function createRoleTable(grants: readonly RoleGrant[], admins: readonly string[] = []): RoleTable {
  const all: RoleGrant[] = [...admins.map((spiffeId): RoleGrant => ({ spiffeId: checkServiceIdentity(spiffeId), role: "admin" })), ...grants];
  const merged = new Map<string, { admin: boolean; read: boolean; enqueue: Set<string> }>();
  for (const g of all) {
    checkServiceIdentity(g.spiffeId);
    const entry = merged.get(g.spiffeId) ?? { admin: false, read: false, enqueue: new Set<string>() };
    if (g.role === "admin") entry.admin = true;
    if (g.role === "read") entry.read = true;
    if (g.role === "enqueue") for (const w of g.workspaces ?? []) entry.enqueue.add(w);
    merged.set(g.spiffeId, entry);
  }
  return { of: (id) => merged.get(id), grants: all };
}

/** "admin", "read", "enqueue:w1,w2" (the flag's own syntax), for messages and logs. */
export function describeGrant(g: RoleGrant): string {
  return g.role === "enqueue" ? `enqueue:${(g.workspaces ?? []).join(",")}` : g.role;
}
