import { Code, ConnectError } from "@connectrpc/connect";
import { sql, type Kysely } from "kysely";
import type { Database } from "../../store/schema.js";
import { recordEvent } from "../../events/record.js";
import { checkCapability, checkExecutionKind, scheduleLimits } from "../jobs/rules.js";

/** A runner's own description of itself, as sent to register. */
export interface Registration {
  readonly workspaceId: string;
  readonly runnerId: string;
  readonly slots: number;
  readonly cpu: number;
  readonly memoryBytes: number;
  readonly architecture: string;
  readonly labels: readonly string[];
  readonly clockOffsetNs: number;
  /**
   * The runner process this comes from: random per process start; '' (the default) when the runner
   * sends none.
   */
  readonly instanceId?: string;
  /** When that process started, as it says. */
  readonly instanceStartedAt?: Date;
  /**
   * Capabilities (additive): "linux", ...; "docker"/"process"; feature names; the runner's own
   * concurrency.
   */
  readonly os?: string;
  readonly executionKinds?: readonly string[];
  readonly features?: readonly string[];
  readonly maxConcurrency?: number;
  /** The runner's version; '' when it sends none. */
  readonly version?: string;
  /** It registers again to say it drains: its state is "draining" until it stops. */
  readonly draining?: boolean;
}

/** What a registration changed of the one stored before it; undefined fields did not change. */
export interface RegistrationChange {
  readonly slots?: { readonly from: number; readonly to: number };
  readonly labels?: { readonly from: readonly string[]; readonly to: readonly string[] };
  /**
   * The runner had been heard from within the lease length: the change applies to a runner at work.
   */
  readonly live: boolean;
}

/** The outcome of a stored registration. */
export interface Registered {
  /** Set when an earlier registration of this runner had other slots or labels. */
  readonly change?: RegistrationChange;
}

/** Bounds that keep a registration meaningful; a value outside is refused by name. */
const registrationLimits = { maxSlots: 1024, maxLabels: 64, maxLabelLength: 63 } as const;

const labelPattern = /^[A-Za-z0-9][A-Za-z0-9._:/=-]*$/;
const instancePattern = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

/** Checks a registration's values; throws invalid_argument naming the first bad field. */
function validateRegistration(r: Registration): void {
  const bad = (message: string): never => {
    throw new ConnectError(message, Code.InvalidArgument);
  };
  if (!Number.isInteger(r.slots) || r.slots < 1 || r.slots > registrationLimits.maxSlots) {
    bad(
      `slots must be between 1 and ${registrationLimits.maxSlots} (the most ` +
        `jobs the runner runs at once); got ${r.slots}`,
    );
  }
  if (r.cpu < 0) bad(`cpu must not be negative; got ${r.cpu}`);
  if (r.memoryBytes < 0 || !Number.isSafeInteger(r.memoryBytes))
    bad(`memoryBytes must be a non-negative byte count; got ${r.memoryBytes}`);
  if (r.architecture.length > 64) bad("architecture is longer than 64 characters");
  if ((r.version ?? "").length > 64 || /[^\x21-\x7e]/.test(r.version ?? ""))
    bad("version must be at most 64 printable ASCII characters without spaces");
  if (!Number.isSafeInteger(r.clockOffsetNs))
    bad(`clockOffsetNs is out of range; got ${r.clockOffsetNs}`);
  if (r.instanceId && !instancePattern.test(r.instanceId))
    bad(
      `instanceId ${JSON.stringify(r.instanceId.slice(0, 80))} is not an ` +
        `instance id: 1 to 64 characters of A-Z a-z 0-9 . _ -, starting with a ` +
        `letter or digit (a random UUID per runner process is one)`,
    );
  if (r.os) checkCapability("os", r.os);
  (r.executionKinds ?? []).forEach((k, i) => checkExecutionKind(`executionKinds[${i}]`, k));
  if ((r.features ?? []).length > scheduleLimits.maxFeatures)
    bad(
      `features has ${r.features!.length} entries; at most ${scheduleLimits.maxFeatures} are allowed`,
    );
  (r.features ?? []).forEach((f, i) => checkCapability(`features[${i}]`, f));
  const maxConcurrency = r.maxConcurrency ?? 0;
  if (
    !Number.isInteger(maxConcurrency) ||
    maxConcurrency < 0 ||
    maxConcurrency > registrationLimits.maxSlots
  )
    bad(`maxConcurrency must be 0 to ${registrationLimits.maxSlots}; got ${maxConcurrency}`);
  if (r.labels.length > registrationLimits.maxLabels)
    bad(
      `labels has ${r.labels.length} entries; at most ${registrationLimits.maxLabels} are allowed`,
    );
  r.labels.forEach((label, i) => {
    if (
      label.length === 0 ||
      label.length > registrationLimits.maxLabelLength ||
      !labelPattern.test(label)
    ) {
      bad(
        `labels[${i}] ${JSON.stringify(label)} is not a label: 1 to ` +
          `${registrationLimits.maxLabelLength} characters of A-Z a-z 0-9 . _ : / ` +
          `= -, starting with a letter or digit`,
      );
    }
  });
}

/**
 * Stores or updates a registration. A retired runner stays retired: its
 * registration is refused, not revived. One process per runner identity: a
 * registration from another instance than the stored one is refused with
 * already_exists while the stored one is heard from (last_seen_at, moved by
 * register, claim and renew, within the lease length), so the live process
 * keeps working and the newer one is told who holds the identity. The
 * decision is one predicate of the upsert, so two instances registering at
 * once cannot both pass it.
 */
export async function register(
  db: Kysely<Database>,
  r: Registration,
  leaseSeconds: number,
): Promise<Registered> {
  validateRegistration(r);
  const labels = [...new Set(r.labels)].sort();
  const values = {
    workspace_id: r.workspaceId,
    runner_id: r.runnerId,
    slots: r.slots,
    cpu: r.cpu,
    memory_bytes: r.memoryBytes,
    architecture: r.architecture,
    labels,
    clock_offset_ns: r.clockOffsetNs,
    instance_id: r.instanceId ?? "",
    instance_started_at: r.instanceStartedAt ?? null,
    os: r.os ?? "",
    execution_kinds: [...new Set(r.executionKinds ?? [])].sort(),
    features: [...new Set(r.features ?? [])].sort(),
    max_concurrency: r.maxConcurrency ?? 0,
    version: r.version ?? "",
  };
  const heard = runnerHeardFrom("runners", leaseSeconds);
  const stored = (tx: Kysely<Database>) =>
    tx
      .selectFrom("runners")
      .select([
        "slots",
        "labels",
        "instance_id",
        "instance_started_at",
        "updated_at",
        "last_seen_at",
        "retired_at",
        heard.as("live"),
      ])
      .where("workspace_id", "=", r.workspaceId)
      .where("runner_id", "=", r.runnerId);
  // The registration and its event commit together.
  return db.transaction().execute(async (tx) => {
    const before = await stored(tx).forUpdate().executeTakeFirst();
    const row = await tx
      .insertInto("runners")
      .values(values)
      .onConflict((oc) =>
        oc
          .columns(["workspace_id", "runner_id"])
          .doUpdateSet({
            ...values,
            updated_at: sql`now()`,
            last_seen_at: sql`now()`,
            // An admin's drain order outlives the runner's registrations (fleet/drain.ts).
            draining_at: r.draining
              ? sql`coalesce(runners.draining_at, now())`
              : sql`case when runners.drain_ordered_by is not null then runners.draining_at end`,
          })
          .where("runners.retired_at", "is", null)
          .where((eb) =>
            eb.or([eb("runners.instance_id", "=", eb.ref("excluded.instance_id")), eb.not(heard)]),
          ),
      )
      .returning("runner_id")
      .executeTakeFirst();
    if (!row) {
      // A registration inserted at the same moment holds no lock `before` saw: read what won.
      const holder = before ?? (await stored(tx).executeTakeFirstOrThrow());
      if (holder.retired_at)
        throw new ConnectError(
          `runner "${r.runnerId}" in workspace "${r.workspaceId}" is retired; enroll a new runner identity`,
          Code.PermissionDenied,
        );
      throw new ConnectError(secondInstanceMessage(r, holder, leaseSeconds), Code.AlreadyExists);
    }
    await recordEvent(tx, {
      type: "runner.registered",
      workspaceId: r.workspaceId,
      runnerId: r.runnerId,
      data: { slots: r.slots, labels },
    });
    if (!before) return {};
    const slotsChanged = before.slots !== r.slots;
    const labelsChanged = before.labels.join(",") !== labels.join(",");
    if (!slotsChanged && !labelsChanged) return {};
    return {
      change: {
        live: before.live,
        slots: slotsChanged ? { from: before.slots, to: r.slots } : undefined,
        labels: labelsChanged ? { from: before.labels, to: labels } : undefined,
      },
    };
  });
}

/**
 * True for a runner row heard from (registered, claimed or renewed) within
 * the lease length: its process is taken to be alive.
 */
function runnerHeardFrom(alias: string, leaseSeconds: number) {
  return sql<boolean>`${sql.ref(`${alias}.last_seen_at`)} > now() - make_interval(secs => ${leaseSeconds})`;
}

/** The refusal of a second process: who holds the identity, since when, and when it is free. */
function secondInstanceMessage(
  r: Registration,
  holder: {
    instance_id: string;
    instance_started_at: Date | null;
    updated_at: Date;
    last_seen_at: Date;
  },
  leaseSeconds: number,
): string {
  const started = holder.instance_started_at
    ? `started ${new Date(holder.instance_started_at).toISOString()}`
    : `registered ${new Date(holder.updated_at).toISOString()}, its start time unknown`;
  const instance = holder.instance_id
    ? `instance ${holder.instance_id}`
    : "a process that sent no instance id";
  const free = new Date(
    new Date(holder.last_seen_at).getTime() + leaseSeconds * 1000,
  ).toISOString();
  return (
    `runner "${r.runnerId}" in workspace "${r.workspaceId}" is already ` +
    `running as ${instance} (${started}, last heard from ` +
    `${new Date(holder.last_seen_at).toISOString()}); another process with ` +
    `the same identity is refused until that one has been silent for the ` +
    `lease length (${leaseSeconds} s, not before ${free}): stop the other ` +
    `process, or give this one a runner identity of its own`
  );
}

/** One line naming what a registration changed, e.g. "slots 1 → 2, labels linux → docker,linux". */
export function describeChange(change: RegistrationChange): string {
  const parts: string[] = [];
  if (change.slots) parts.push(`slots ${change.slots.from} → ${change.slots.to}`);
  if (change.labels)
    parts.push(
      `labels ${change.labels.from.join(",") || "(none)"} → ${change.labels.to.join(",") || "(none)"}`,
    );
  return parts.join(", ");
}
