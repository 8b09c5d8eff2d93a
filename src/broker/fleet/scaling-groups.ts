import { Code, ConnectError } from "@connectrpc/connect";
import { sql, type Kysely } from "kysely";
import type { Database } from "../../store/schema.js";
import { checkSegmentId } from "../../identity/segment-id.js";
import { bad, checkLabels } from "../jobs/rules.js";

/** The providers an autoscale controller runs instances with. */
const scalingProviders = ["process", "docker", "exec"] as const;

/** Bounds of a registration's lease, in seconds, and its default. */
const groupLeaseSeconds = { min: 5, max: 3600, default: 60 } as const;

/** Most runners one group may have. */
const maxGroupRunners = 1000;

/** A group name: its runners' ids are "NAME-...", so it is a lower-case id of its own. */
const groupName = /^[a-z0-9][a-z0-9_]{0,62}$/;

/** A controller's registration of one scaling group. */
export interface GroupRegistration {
  readonly name: string;
  readonly workspaceId: string;
  readonly labels: readonly string[];
  /** Empty: unknown. */
  readonly architecture: string;
  readonly os: string;
  readonly executionKinds: readonly string[];
  readonly features: readonly string[];
  readonly minRunners: number;
  readonly maxRunners: number;
  /** 0: 1. */
  readonly slotsPerRunner: number;
  readonly idleSeconds: number;
  readonly cooldownSeconds: number;
  readonly provider: string;
  readonly controller: string;
  /** 0: groupLeaseSeconds.default. */
  readonly leaseSeconds: number;
}

/** The registration as it stands after a put. */
export interface GroupHold {
  readonly name: string;
  readonly controller: string;
  readonly leaseExpiresAt: Date;
  /** Another controller's lease had expired: this one took the group over. */
  readonly tookOver: boolean;
}

/** Checks a registration; throws invalid_argument naming the first bad field. */
function checkGroupRegistration(g: GroupRegistration): void {
  if (!groupName.test(g.name))
    bad(
      `name ${JSON.stringify(g.name.slice(0, 80))} is not a group name: 1 to 63 characters of ` +
        `a-z 0-9 _, starting with a letter or digit (its runners are named "NAME-...")`,
    );
  checkSegmentId("spec.workspaceId", g.workspaceId);
  checkLabels("spec.labels", g.labels);
  if (!(scalingProviders as readonly string[]).includes(g.provider))
    bad(
      `spec.provider must be one of ${scalingProviders.join(", ")}; got ${JSON.stringify(g.provider)}`,
    );
  if (g.minRunners < 0) bad(`spec.minRunners must be 0 or more; got ${g.minRunners}`);
  if (g.maxRunners < Math.max(g.minRunners, 1) || g.maxRunners > maxGroupRunners)
    bad(
      `spec.maxRunners must be 1 to ${maxGroupRunners} and at least minRunners ` +
        `(${g.minRunners}); got ${g.maxRunners}`,
    );
  if (g.slotsPerRunner < 0 || g.slotsPerRunner > 1000)
    bad(`spec.slotsPerRunner must be 1 to 1000 (0 means 1); got ${g.slotsPerRunner}`);
  if (g.idleSeconds < 0 || g.cooldownSeconds < 0)
    bad("spec.idleSeconds and spec.cooldownSeconds must be 0 or more");
  if (!g.controller || g.controller.length > 200)
    bad("controller must name the controller instance in 1 to 200 characters");
  if (
    g.leaseSeconds !== 0 &&
    (g.leaseSeconds < groupLeaseSeconds.min || g.leaseSeconds > groupLeaseSeconds.max)
  )
    bad(
      `leaseSeconds must be ${groupLeaseSeconds.min} to ${groupLeaseSeconds.max} ` +
        `(0 means ${groupLeaseSeconds.default}); got ${g.leaseSeconds}`,
    );
}

/**
 * Registers or renews a group for its controller, under a lease: refused (failed_precondition)
 * while another controller holds a live lease on it, so two controllers never run one group; a
 * lapsed lease is taken over. The group's row is locked first, so two controllers racing for a
 * free group are decided one after the other.
 */
export async function putScalingGroup(
  db: Kysely<Database>,
  g: GroupRegistration,
): Promise<GroupHold> {
  checkGroupRegistration(g);
  const leaseSeconds = g.leaseSeconds || groupLeaseSeconds.default;
  return db.transaction().execute(async (tx) => {
    const held = await tx
      .selectFrom("scaling_groups")
      .select(["controller", "lease_expires_at"])
      .where("name", "=", g.name)
      .forUpdate()
      .executeTakeFirst();
    // The database's clock, as every lease's.
    const { rows } = await sql<{ now: Date }>`select now() as now`.execute(tx);
    const now = rows[0]!.now;
    if (held && held.controller !== g.controller && held.lease_expires_at > now)
      throw new ConnectError(
        `scaling group "${g.name}" is held by controller "${held.controller}" until ` +
          `${held.lease_expires_at.toISOString()}; a second controller for one group is refused ` +
          `(stop the other one, or start this one after its lease expires)`,
        Code.FailedPrecondition,
      );
    const values = {
      name: g.name,
      workspace_id: g.workspaceId,
      labels: [...new Set(g.labels)].sort(),
      architecture: g.architecture || null,
      os: g.os || null,
      execution_kinds: [...new Set(g.executionKinds)].sort(),
      features: [...new Set(g.features)].sort(),
      min_runners: g.minRunners,
      max_runners: g.maxRunners,
      slots_per_runner: g.slotsPerRunner || 1,
      idle_seconds: g.idleSeconds,
      cooldown_seconds: g.cooldownSeconds,
      provider: g.provider,
      controller: g.controller,
      lease_expires_at: new Date(now.getTime() + leaseSeconds * 1000),
    };
    const { name: _name, ...update } = values;
    const row = await tx
      .insertInto("scaling_groups")
      .values(values)
      .onConflict((c) => c.column("name").doUpdateSet({ ...update, updated_at: now }))
      .returning(["name", "controller", "lease_expires_at"])
      .executeTakeFirstOrThrow();
    return {
      name: row.name,
      controller: row.controller,
      leaseExpiresAt: row.lease_expires_at,
      tookOver: held !== undefined && held.controller !== g.controller,
    };
  });
}
