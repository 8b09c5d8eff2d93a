import type { ColumnType, Generated } from "kysely";

/**
 * The database as kysely sees it. int8 columns are read as JS numbers on both
 * dialects (see database.ts); every value stored in them stays below 2^53.
 */
export interface Database {
  runners: RunnersTable;
  audit_records: AuditRecordsTable;
}

type Timestamp = ColumnType<Date, Date | string, Date | string>;

/** A runner's latest registration. */
export interface RunnersTable {
  workspace_id: string;
  runner_id: string;
  slots: number;
  cpu: number;
  memory_bytes: number;
  architecture: string;
  labels: string[];
  clock_offset_ns: number;
  registered_at: ColumnType<Date, Date | string | undefined, Date | string>;
  updated_at: ColumnType<Date, Date | string | undefined, Date | string>;
  last_seen_at: ColumnType<Date, Date | string | undefined, Date | string>;
  /** Set when the runner is retired: it is refused from then on. */
  retired_at: ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;
}

/** One identity decision, allowed or refused. */
export interface AuditRecordsTable {
  id: Generated<number>;
  at: Timestamp;
  route: string;
  decision: "allow" | "deny";
  reason: string;
  spiffe_id: string | null;
  certificate_serial: string | null;
  certificate_sha256: string | null;
  certificate_not_after: ColumnType<Date | null, Date | string | null, Date | string | null>;
  remote_address: string | null;
}
