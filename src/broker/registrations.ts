import { Code, ConnectError } from "@connectrpc/connect";
import { sql, type Kysely } from "kysely";
import type { Database } from "../store/schema.js";
import { recordEvent } from "../events/record.js";
import { checkCapability, checkExecutionKind, scheduleLimits } from "./jobs.js";

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
  /** Capabilities (additive): "linux", ...; "docker"/"process"; feature names; the runner's own concurrency. */
  readonly os?: string;
  readonly executionKinds?: readonly string[];
  readonly features?: readonly string[];
  readonly maxConcurrency?: number;
}

/** Bounds that keep a registration meaningful; a value outside is refused by name. */
export const registrationLimits = { maxSlots: 1024, maxLabels: 64, maxLabelLength: 63 } as const;

const labelPattern = /^[A-Za-z0-9][A-Za-z0-9._:/=-]*$/;

/** Checks a registration's values; throws invalid_argument naming the first bad field. */
export function validateRegistration(r: Registration): void {
  const bad = (message: string): never => {
    throw new ConnectError(message, Code.InvalidArgument);
  };
  if (!Number.isInteger(r.slots) || r.slots < 1 || r.slots > registrationLimits.maxSlots) {
    bad(`slots must be between 1 and ${registrationLimits.maxSlots} (the most jobs the runner runs at once); got ${r.slots}`);
  }
  if (r.cpu < 0) bad(`cpu must not be negative; got ${r.cpu}`);
  if (r.memoryBytes < 0 || !Number.isSafeInteger(r.memoryBytes)) bad(`memoryBytes must be a non-negative byte count; got ${r.memoryBytes}`);
  if (r.architecture.length > 64) bad("architecture is longer than 64 characters");
  if (!Number.isSafeInteger(r.clockOffsetNs)) bad(`clockOffsetNs is out of range; got ${r.clockOffsetNs}`);
  if (r.os) checkCapability("os", r.os);
  (r.executionKinds ?? []).forEach((k, i) => checkExecutionKind(`executionKinds[${i}]`, k));
  if ((r.features ?? []).length > scheduleLimits.maxFeatures) bad(`features has ${r.features!.length} entries; at most ${scheduleLimits.maxFeatures} are allowed`);
  (r.features ?? []).forEach((f, i) => checkCapability(`features[${i}]`, f));
  const maxConcurrency = r.maxConcurrency ?? 0;
  if (!Number.isInteger(maxConcurrency) || maxConcurrency < 0 || maxConcurrency > registrationLimits.maxSlots) bad(`maxConcurrency must be 0 to ${registrationLimits.maxSlots}; got ${maxConcurrency}`);
  if (r.labels.length > registrationLimits.maxLabels) bad(`labels has ${r.labels.length} entries; at most ${registrationLimits.maxLabels} are allowed`);
  r.labels.forEach((label, i) => {
    if (label.length === 0 || label.length > registrationLimits.maxLabelLength || !labelPattern.test(label)) {
      bad(`labels[${i}] ${JSON.stringify(label)} is not a label: 1 to ${registrationLimits.maxLabelLength} characters of A-Z a-z 0-9 . _ : / = -, starting with a letter or digit`);
    }
  });
}

/**
 * Stores or updates a registration. A retired runner stays retired: its
 * registration is refused, not revived.
 */
export async function register(db: Kysely<Database>, r: Registration): Promise<void> {
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
    os: r.os ?? "",
    execution_kinds: [...new Set(r.executionKinds ?? [])].sort(),
    features: [...new Set(r.features ?? [])].sort(),
    max_concurrency: r.maxConcurrency ?? 0,
  };
  // The registration and its event commit together.
  await db.transaction().execute(async (tx) => {
    const row = await tx
      .insertInto("runners")
      .values(values)
      .onConflict((oc) =>
        oc
          .columns(["workspace_id", "runner_id"])
          .doUpdateSet({ ...values, updated_at: sql`now()`, last_seen_at: sql`now()` })
          .where("runners.retired_at", "is", null),
      )
      .returning("runner_id")
      .executeTakeFirst();
    if (!row) {
      throw new ConnectError(`runner "${r.runnerId}" in workspace "${r.workspaceId}" is retired; enroll a new runner identity`, Code.PermissionDenied);
    }
    await recordEvent(tx, { type: "runner.registered", workspaceId: r.workspaceId, runnerId: r.runnerId, data: { slots: r.slots, labels } });
  });
}
