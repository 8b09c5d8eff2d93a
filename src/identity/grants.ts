import { createHash, randomBytes, randomUUID } from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import { sql, type Kysely, type Selectable, type Transaction } from "kysely";
import type { Database, EnrollmentGrantsTable } from "../store/schema.js";
import { checkSegmentId } from "./segment-id.js";

/** Lifetime bounds of an enrollment grant, in seconds. */
const grantLimits = { defaultSeconds: 600, maxSeconds: 86_400 } as const;

/** Every grant starts with this, so a leaked one is easy to recognise (and to scan for). */
const grantPrefix = "feg_";
const grantPattern = /^feg_[A-Za-z0-9_-]{43}$/;

/** A grant as stored: everything but the secret. */
export type GrantRecord = Selectable<EnrollmentGrantsTable>;

/** A new grant: the secret (to show once) and its record. */
export interface CreatedGrant {
  readonly grant: string;
  readonly record: GrantRecord;
}

/** What a grant is for. */
export interface GrantRequest {
  readonly workspaceId: string;
  /** Empty: any runner id in the workspace. */
  readonly runnerId: string;
  /** 0 means the default. */
  readonly expiresInSeconds: number;
  /** The SPIFFE ID of the administrator creating it. */
  readonly createdBy: string;
  /**
   * It may enroll an identity still in use (live, or holding an unexpired certificate): a second key
   * for that identity, audited as a replacement.
   */
  readonly replace?: boolean;
}

/**
 * Creates a one-time enrollment grant: 256 random bits, of which only the
 * SHA-256 is stored. The secret is returned here and nowhere else.
 */
export async function createGrant(db: Kysely<Database>, req: GrantRequest): Promise<CreatedGrant> {
  const bad = (message: string): never => {
    throw new ConnectError(message, Code.InvalidArgument);
  };
  checkSegmentId("workspaceId", req.workspaceId);
  if (req.runnerId) checkSegmentId("runnerId", req.runnerId);
  const seconds = req.expiresInSeconds || grantLimits.defaultSeconds;
  if (!Number.isInteger(seconds) || seconds < 1 || seconds > grantLimits.maxSeconds) {
    bad(
      `expiresInSeconds must be 1 to ${grantLimits.maxSeconds} (0 means ` +
        `${grantLimits.defaultSeconds}); got ${req.expiresInSeconds}`,
    );
  }
  const grant = grantPrefix + randomBytes(32).toString("base64url");
  const record = await db
    .insertInto("enrollment_grants")
    .values({
      id: randomUUID(),
      token_sha256: hashGrant(grant),
      workspace_id: req.workspaceId,
      runner_id: req.runnerId || null,
      created_by: req.createdBy,
      expires_at: sql<Date>`now() + make_interval(secs => ${seconds})`,
      used_at: null,
      used_by_runner: null,
      replace: req.replace ?? false,
    })
    .returningAll()
    .executeTakeFirstOrThrow();
  return { grant, record };
}

/**
 * Uses a grant for `runnerId`, atomically: one UPDATE that matches only an
 * unused, unexpired grant allowing that runner id, so two enrollments racing
 * with one grant cannot both succeed. Run inside the transaction that issues
 * the certificate, so a failure after this point leaves the grant unused.
 * When nothing matched, a second read says why, without using the grant.
 */
export async function useGrant(
  tx: Transaction<Database>,
  grant: string,
  runnerId: string,
): Promise<GrantRecord> {
  if (!grant)
    throw new ConnectError(
      "grant is required: the enrollment grant from `forelead grants create`",
      Code.InvalidArgument,
    );
  if (!grantPattern.test(grant))
    throw new ConnectError(
      `the grant is not an enrollment grant (they start with "${grantPrefix}" ` +
        `and are 47 characters); check it was copied whole`,
      Code.Unauthenticated,
    );
  const hash = hashGrant(grant);
  const used = await tx
    .updateTable("enrollment_grants")
    .set({ used_at: sql`now()`, used_by_runner: runnerId })
    .where("token_sha256", "=", hash)
    .where("used_at", "is", null)
    .where("expires_at", ">", sql<Date>`now()`)
    .where((eb) => eb.or([eb("runner_id", "is", null), eb("runner_id", "=", runnerId)]))
    .returningAll()
    .executeTakeFirst();
  if (used) return used;
  const found = await tx
    .selectFrom("enrollment_grants")
    .selectAll()
    .where("token_sha256", "=", hash)
    .executeTakeFirst();
  if (!found)
    throw new ConnectError(
      "the enrollment grant is not known to this control plane; ask an administrator for a new one",
      Code.Unauthenticated,
    );
  if (found.used_at) {
    throw new ConnectError(
      `the enrollment grant ${found.id} was already used at ` +
        `${found.used_at.toISOString()} (runner "${found.used_by_runner}"); a ` +
        `grant enrolls one runner once; ask for a new one`,
      Code.Unauthenticated,
    );
  }
  if (found.runner_id !== null && found.runner_id !== runnerId) {
    throw new ConnectError(
      `the enrollment grant ${found.id} is for runner "${found.runner_id}"; it cannot enroll runner "${runnerId}"`,
      Code.PermissionDenied,
    );
  }
  throw new ConnectError(
    `the enrollment grant ${found.id} expired at ` +
      `${found.expires_at.toISOString()}; ask for a new one (grants last ` +
      `${grantLimits.defaultSeconds} s unless created with a longer expiry)`,
    Code.Unauthenticated,
  );
}

/** The stored form of a grant. */
function hashGrant(grant: string): Buffer {
  return createHash("sha256").update(grant, "utf8").digest();
}
