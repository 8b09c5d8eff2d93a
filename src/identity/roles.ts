import { parseSpiffeId } from "./spiffe.js";
import { principalOf } from "./principal.js";
import { maxSegmentIdLength, segmentIdProblem } from "./segment-id.js";

/**
 * Roles the configuration grants service identities:
 * - `admin`: every admin method;
 * - `read`: the read-only admin methods (jobs, runners, audit, certificates),
 *   everywhere; `read` for named workspaces (`read:w1,w2`): the read methods
 *   about those workspaces' jobs, runners and inventory only;
 * - `enqueue` for named workspaces: enqueue jobs there;
 * - `delegate`: no power of its own but to open a session for a person signed in by single
 *   sign-on, with the person's ID token, and then act as that person with the person's roles
 *   (the dashboard's certificate); it is never held with another role.
 * People (`spiffe://<td>/users/<segment>`) are granted roles as services are, and through their
 * provider groups (`--sso-group GROUP=ROLE`).
 * Whatever its roles, an identity may read and cancel the jobs it enqueued
 * (and, short of admin, cancel no others); the matrix is in README.md
 * ("Service identities and roles"), the check in src/api/guard.ts.
 */
export type RoleName = "admin" | "read" | "enqueue" | "delegate";

/** The role names, for messages and validation. */
export const roleNames: readonly RoleName[] = ["admin", "read", "enqueue", "delegate"];

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
  /** The identity may act for people signed in by single sign-on (and do nothing else). */
  readonly delegate: boolean;
}

/**
 * Whether an identity may act on a job (cancel it, retry it): an admin on every job, anyone else on
 * the jobs it enqueued only, whatever its roles (src/api/guard.ts holds every route to it).
 */
export function mayActOnJob(
  roles: IdentityRoles | undefined,
  spiffeId: string,
  enqueuedBy: string,
): boolean {
  return roles?.admin === true || (enqueuedBy !== "" && enqueuedBy === spiffeId);
}

/** A role given to every person whose ID token lists a provider group (`--sso-group`). */
export interface GroupGrant {
  readonly group: string;
  readonly role: Exclude<RoleName, "delegate">;
  readonly workspaces?: readonly string[];
}

/** The roles of every granted identity. */
export interface RoleTable {
  /** The merged roles of `spiffeId`, or undefined when it is granted nothing. */
  of(spiffeId: string): IdentityRoles | undefined;
  /**
   * The merged roles of a person: its own grants and those of the provider `groups` its ID token
   * listed; undefined when it is granted nothing.
   */
  ofPerson(spiffeId: string, groups: readonly string[]): IdentityRoles | undefined;
  /** Every grant, for the start-up line. */
  readonly grants: readonly RoleGrant[];
  readonly groupGrants: readonly GroupGrant[];
}

const usage =
  "use --grant SPIFFE_ID=admin, --grant " +
  "SPIFFE_ID=read[:WORKSPACE[,WORKSPACE...]], --grant " +
  "SPIFFE_ID=enqueue:WORKSPACE[,WORKSPACE...] or --grant SPIFFE_ID=delegate";

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
  return { spiffeId, ...parseRole("--grant", text, text.slice(eq + 1), spiffeId) };
}

/**
 * Parses one `--sso-group` value: `GROUP=ROLE`, ROLE as in --grant but never `delegate` (a
 * delegate is a service's certificate, not a person). The last "=" splits, so a group name may
 * hold "=".
 */
export function parseGroupGrant(text: string): GroupGrant {
  const eq = text.lastIndexOf("=");
  if (eq <= 0)
    throw new Error(
      `--sso-group ${JSON.stringify(text)}: use --sso-group GROUP=ROLE, e.g. ops=read`,
    );
  const group = text.slice(0, eq);
  const { role, workspaces } = parseRole("--sso-group", text, text.slice(eq + 1), group);
  if (role === "delegate")
    throw new Error(
      `--sso-group ${JSON.stringify(text)}: delegate is a service's role (--grant ID=delegate), ` +
        `not a person's`,
    );
  return { group, role, workspaces };
}

/** The role part of a grant, e.g. `read:w1,w2`; `who` names the grantee in hints. */
function parseRole(
  flag: string,
  text: string,
  role: string,
  who: string,
): { role: RoleName; workspaces?: readonly string[] } {
  if (role === "admin" || role === "read" || role === "delegate") return { role };
  for (const scoped of ["read", "enqueue"] as const) {
    if (role.startsWith(`${scoped}:`))
      return { role: scoped, workspaces: grantWorkspaces(text, role.slice(scoped.length + 1)) };
  }
  if (role === "enqueue")
    throw new Error(
      `${flag} ${JSON.stringify(text)}: enqueue needs its workspaces, e.g. ${who}=enqueue:w1,w2`,
    );
  throw new Error(
    `${flag} ${JSON.stringify(text)}: unknown role ${JSON.stringify(role)}; ${usage}`,
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

/**
 * Merges grants into a table; `admins` are the `--admin` IDs (role admin), `groups` the
 * `--sso-group` mappings. Throws when a delegate is granted any other role: a delegate acts only
 * as the person it carries a session of.
 */
export function createRoleTable(
  grants: readonly RoleGrant[],
  admins: readonly string[] = [],
  groups: readonly GroupGrant[] = [],
): RoleTable {
  const all: RoleGrant[] = [
    ...admins.map((spiffeId): RoleGrant => ({
      spiffeId: checkServiceIdentity(spiffeId),
      role: "admin",
    })),
    ...grants,
  ];
  const merged = new Map<string, IdentityRoles>();
  for (const g of all) {
    checkServiceIdentity(g.spiffeId);
    merged.set(g.spiffeId, withGrant(merged.get(g.spiffeId), g));
  }
  for (const [id, roles] of merged) {
    if (
      roles.delegate &&
      (roles.admin || roles.read || roles.readWorkspaces.size > 0 || roles.enqueue.size > 0)
    )
      throw new Error(
        `${id} is granted delegate and another role; a delegate has no power of its own ` +
          `(it acts with the roles of the person it signed in), so grant it delegate alone`,
      );
  }
  return {
    of: (id) => merged.get(id),
    ofPerson: (id, names) => {
      let roles = merged.get(id);
      for (const g of groups) if (names.includes(g.group)) roles = withGrant(roles, g);
      return roles;
    },
    grants: all,
    groupGrants: groups,
  };
}

/** `roles` with one more grant merged in. */
function withGrant(
  roles: IdentityRoles | undefined,
  g: { readonly role: RoleName; readonly workspaces?: readonly string[] },
): IdentityRoles {
  const readWorkspaces = new Set(roles?.readWorkspaces);
  const enqueue = new Set(roles?.enqueue);
  if (g.role === "read") for (const w of g.workspaces ?? []) readWorkspaces.add(w);
  if (g.role === "enqueue") for (const w of g.workspaces ?? []) enqueue.add(w);
  return {
    admin: (roles?.admin ?? false) || g.role === "admin",
    read: (roles?.read ?? false) || (g.role === "read" && !g.workspaces),
    readWorkspaces,
    enqueue,
    delegate: (roles?.delegate ?? false) || g.role === "delegate",
  };
}

/** "admin", "read", "read:w1", "enqueue:w1,w2" (the flag's own syntax), for messages and logs. */
export function describeGrant(g: {
  readonly role: RoleName;
  readonly workspaces?: readonly string[];
}): string {
  return g.workspaces ? `${g.role}:${g.workspaces.join(",")}` : g.role;
}
