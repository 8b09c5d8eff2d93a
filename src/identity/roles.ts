import { parseSpiffeId } from "./spiffe.js";
import { principalOf } from "./principal.js";
import { maxSegmentIdLength, segmentIdProblem } from "./segment-id.js";

/**
 * Roles the configuration grants service identities:
 * - `admin`: every admin method;
 * - `read`: the read-only admin methods (jobs, runners, audit, certificates),
 *   everywhere; `read` for named workspaces (`read:w1,w2`): the read methods
 *   about those workspaces' jobs, runners and inventory only;
 * - `enqueue` for named workspaces: enqueue jobs there.
 * Whatever its roles, an identity may read and cancel the jobs it enqueued
 * (and, short of admin, cancel no others); the matrix is in README.md
 * ("Service identities and roles"), the check in src/api/guard.ts.
 */
export type RoleName = "admin" | "read" | "enqueue";

/** The role names, for messages and validation. */
export const roleNames: readonly RoleName[] = ["admin", "read", "enqueue"];

/** One role granted to one SPIFFE ID, as `--admin ID` or `--grant ID=ROLE` says. */
export interface RoleGrant {
  readonly spiffeId: string;
  readonly role: RoleName;
  /**
   * For `enqueue`, and `read` scoped to workspaces: the workspaces it covers (never empty when
   * set).
   */
  readonly workspaces?: readonly string[];
}

/** Everything one identity was granted, merged over all its grants. */
export interface IdentityRoles {
  readonly admin: boolean;
  /** The global `read` role: every read method, every workspace. */
  readonly read: boolean;
  /** Workspaces the identity may read (`read:w1,w2`); the global role covers them all. */
  readonly readWorkspaces: ReadonlySet<string>;
  /** Workspaces where the identity may enqueue. */
  readonly enqueue: ReadonlySet<string>;
}

/** The roles of every granted identity. */
export interface RoleTable {
  /** The merged roles of `spiffeId`, or undefined when it is granted nothing. */
  of(spiffeId: string): IdentityRoles | undefined;
  /** Every grant, for the start-up line. */
  readonly grants: readonly RoleGrant[];
}

const usage =
  "use --grant SPIFFE_ID=admin, --grant " +
  "SPIFFE_ID=read[:WORKSPACE[,WORKSPACE...]] or --grant " +
  "SPIFFE_ID=enqueue:WORKSPACE[,WORKSPACE...]";

/**
 * Parses one `--grant` value: `SPIFFE_ID=admin`, `SPIFFE_ID=read`,
 * `SPIFFE_ID=read:w1,w2` or `SPIFFE_ID=enqueue:w1,w2`. Throws naming what is
 * wrong. A SPIFFE ID cannot contain "=", so the first "=" splits the identity
 * from the role.
 */
export function parseRoleGrant(text: string, trustDomain?: string): RoleGrant {
  const eq = text.indexOf("=");
  if (eq === -1) throw new Error(`--grant ${JSON.stringify(text)} has no "="; ${usage}`);
  const spiffeId = checkServiceIdentity(text.slice(0, eq), trustDomain);
  const role = text.slice(eq + 1);
  if (role === "admin" || role === "read") return { spiffeId, role };
  for (const scoped of ["read", "enqueue"] as const) {
    if (role.startsWith(`${scoped}:`))
      return {
        spiffeId,
        role: scoped,
        workspaces: grantWorkspaces(text, role.slice(scoped.length + 1)),
      };
  }
  if (role === "enqueue")
    throw new Error(
      `--grant ${JSON.stringify(text)}: enqueue needs its workspaces, e.g. ${spiffeId}=enqueue:w1,w2`,
    );
  throw new Error(
    `--grant ${JSON.stringify(text)}: unknown role ${JSON.stringify(role)}; ${usage}`,
  );
}

/** The workspaces of a scoped grant (`w1,w2`), each a valid id. */
function grantWorkspaces(text: string, list: string): string[] {
  const workspaces = list.split(",").map((w) => w.trim());
  for (const w of workspaces) {
    const problem = segmentIdProblem(w);
    if (problem)
      throw new Error(
        `--grant ${JSON.stringify(text)}: workspace ${JSON.stringify(w)} is not ` +
          `a valid id (${problem}); an id is 1 to ${maxSegmentIdLength} characters ` +
          `of A-Z a-z 0-9 . _ -`,
      );
  }
  return workspaces;
}

/**
 * Checks that `id` may hold a role: a valid SPIFFE ID in the trust domain
 * (when given) that is not a runner identity, since runners never call admin
 * methods whatever the configuration says.
 */
export function checkServiceIdentity(id: string, trustDomain?: string): string {
  const parsed = parseSpiffeId(id);
  if (trustDomain !== undefined && parsed.trustDomain !== trustDomain) {
    throw new Error(
      `${id} is not in the trust domain "${trustDomain}"; it could never present an accepted certificate`,
    );
  }
  if (principalOf(parsed).kind === "runner") {
    throw new Error(
      `${id} is a runner identity; runners never call admin methods, so it cannot be granted a role`,
    );
  }
  return id;
}

/** Merges grants into a table; `admins` are the `--admin` IDs (role admin). */
export function createRoleTable(
  grants: readonly RoleGrant[],
  admins: readonly string[] = [],
): RoleTable {
  const all: RoleGrant[] = [
    ...admins.map((spiffeId): RoleGrant => ({
      spiffeId: checkServiceIdentity(spiffeId),
      role: "admin",
    })),
    ...grants,
  ];
  const merged = new Map<
    string,
    { admin: boolean; read: boolean; readWorkspaces: Set<string>; enqueue: Set<string> }
  >();
  for (const g of all) {
    checkServiceIdentity(g.spiffeId);
    const entry = merged.get(g.spiffeId) ?? {
      admin: false,
      read: false,
      readWorkspaces: new Set<string>(),
      enqueue: new Set<string>(),
    };
    if (g.role === "admin") entry.admin = true;
    if (g.role === "read" && !g.workspaces) entry.read = true;
    if (g.role === "read") for (const w of g.workspaces ?? []) entry.readWorkspaces.add(w);
    if (g.role === "enqueue") for (const w of g.workspaces ?? []) entry.enqueue.add(w);
    merged.set(g.spiffeId, entry);
  }
  return { of: (id) => merged.get(id), grants: all };
}

/** "admin", "read", "read:w1", "enqueue:w1,w2" (the flag's own syntax), for messages and logs. */
export function describeGrant(g: RoleGrant): string {
  return g.workspaces ? `${g.role}:${g.workspaces.join(",")}` : g.role;
}
