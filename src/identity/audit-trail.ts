import { Code, ConnectError } from "@connectrpc/connect";
import type { Kysely, Selectable } from "kysely";
import type { AuditRecordsTable, Database } from "../store/schema.js";

/** Filters of the audit trail; every one is optional. */
export interface AuditQuery {
  readonly since?: Date;
  readonly until?: Date;
  readonly spiffeId?: string;
  readonly decision?: string;
  readonly kind?: string;
  readonly pageSize?: number;
  readonly pageToken?: string;
}

/** One stored audit record. */
export type StoredAuditRecord = Selectable<AuditRecordsTable>;

/**
 * The kinds a search may ask for: identity decisions, administrative actions, or "notable" — the
 * actions and every refused decision, leaving out the routine allows of runners' requests.
 */
const auditKinds = ["decision", "action", "notable"] as const;

/** Page bounds of the audit trail. */
const auditPageLimits = { defaultSize: 100, maxSize: 1000 } as const;

/**
 * Reads the audit trail newest first. Pages are keyed by record id (the
 * insertion order), so a page token stays valid while new records arrive:
 * the next page continues below the last id seen and never repeats a record.
 */
export async function listAuditRecords(
  db: Kysely<Database>,
  q: AuditQuery,
): Promise<{ records: StoredAuditRecord[]; nextPageToken: string }> {
  const size = q.pageSize || auditPageLimits.defaultSize;
  if (!Number.isInteger(size) || size < 1 || size > auditPageLimits.maxSize) {
    throw new ConnectError(
      `pageSize must be 1 to ${auditPageLimits.maxSize}; got ${q.pageSize}`,
      Code.InvalidArgument,
    );
  }
  if (q.decision && q.decision !== "allow" && q.decision !== "deny") {
    throw new ConnectError(
      `decision must be "allow" or "deny"; got ${JSON.stringify(q.decision)}`,
      Code.InvalidArgument,
    );
  }
  if (q.kind && !(auditKinds as readonly string[]).includes(q.kind)) {
    throw new ConnectError(
      `kind must be one of ${auditKinds.map((k) => JSON.stringify(k)).join(", ")}; ` +
        `got ${JSON.stringify(q.kind.slice(0, 40))}`,
      Code.InvalidArgument,
    );
  }
  let query = db
    .selectFrom("audit_records")
    .selectAll()
    .orderBy("id", "desc")
    .limit(size + 1);
  if (q.pageToken) query = query.where("id", "<", decodePageToken(q.pageToken));
  if (q.since) query = query.where("at", ">=", q.since);
  if (q.until) query = query.where("at", "<", q.until);
  if (q.spiffeId) query = query.where("spiffe_id", "=", q.spiffeId);
  if (q.decision) query = query.where("decision", "=", q.decision as "allow" | "deny");
  if (q.kind === "notable")
    query = query.where((w) => w.or([w("kind", "=", "action"), w("decision", "=", "deny")]));
  else if (q.kind) query = query.where("kind", "=", q.kind as "decision" | "action");
  const rows = await query.execute();
  const page = rows.slice(0, size);
  const nextPageToken = rows.length > size ? encodePageToken(page[page.length - 1]!.id) : "";
  return { records: page, nextPageToken };
}

function encodePageToken(id: number): string {
  return Buffer.from(`audit:${id}`).toString("base64url");
}

function decodePageToken(token: string): number {
  const m = /^audit:(\d{1,15})$/.exec(Buffer.from(token, "base64url").toString("utf8"));
  if (!m)
    throw new ConnectError(
      "pageToken is not one this control plane issued; use nextPageToken from the previous reply",
      Code.InvalidArgument,
    );
  return Number(m[1]);
}
