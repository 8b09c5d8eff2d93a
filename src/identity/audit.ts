import { randomUUID } from "node:crypto";
import { dirname } from "node:path";
import { sql, type Insertable, type Kysely } from "kysely";
import type { AuditRecordsTable, Database } from "../store/schema.js";
import type { CertificateFacts } from "./certificate-policy.js";
import { openAuditSpool } from "./audit-spool.js";
import { adoptOrphanSpools } from "./audit-spool-adoption.js";

/**
 * One identity decision, allowed or refused, or one administrative action
 * (enqueue, cancel, retire, grant created or used, certificate issued) with
 * its outcome. Never holds a secret: no lease token, grant, key or request
 * body.
 */
export interface AuditRecord {
  readonly at: Date;
  /** "decision" when absent. */
  readonly kind?: "decision" | "action";
  /** For actions: e.g. "job.enqueue", "runner.retire", "grant.use". */
  readonly action?: string;
  /** For actions: what was acted on, e.g. "job <id> in workspace w1". */
  readonly target?: string;
  /** e.g. "POST /v1/runner/claim" or "POST /forelead.runner.v1.RunnerService/Claim". */
  readonly route: string;
  readonly decision: "allow" | "deny";
  readonly reason: string;
  readonly spiffeId?: string;
  /**
   * For a delegate's call for a person: the delegate's SPIFFE ID (the certificate is the
   * delegate's; spiffeId is the person's).
   */
  readonly delegate?: string;
  /** For a delegate's call for a person: the identity claim the person signed in with. */
  readonly personClaim?: string;
  readonly certificate?: CertificateFacts;
  readonly remoteAddress?: string;
  /**
   * For aggregated refusals: how many requests the record stands for (1 when absent); `at` is the
   * first.
   */
  readonly count?: number;
  /** For aggregated refusals: the time of the last request. */
  readonly lastAt?: Date;
}

/** What is not yet in the database, for the operator. */
export interface AuditBacklog {
  /** Records waiting in memory for the next write. */
  readonly inMemory: number;
  /** Records in the spool file, waiting for the database. */
  readonly spooled: number;
  readonly spoolBytes: number;
  readonly spoolPath: string;
  /**
   * The process holding the spool (this one), e.g. "pid 12 on host-a, started
   * 2026-01-01T00:00:00.000Z".
   */
  readonly spoolHolder: string;
  /** Lines in the spool's quarantine file: not whole audit rows, set aside for an operator. */
  readonly quarantined: number;
  /** Lines this process moved there (the metric's counter). */
  readonly quarantinedHere: number;
  readonly quarantinePath: string;
  /**
   * Set while the spool cannot be read: why. Its records wait; newer ones go straight to the
   * database.
   */
  readonly spoolUnreadable: string | undefined;
  /** The time of the oldest record not yet in the database. */
  readonly oldestUnwritten: Date | undefined;
}

/** Where audit records go. record() never blocks a request. */
export interface AuditSink {
  record(record: AuditRecord): void;
  /**
   * Set while records can be stored neither in the database nor in the spool:
   * the message to refuse requests with (503), since answering them would
   * leave decisions unrecorded.
   */
  unavailable(): string | undefined;
  backlog(): AuditBacklog;
  /** Writes what is buffered (to the database, or else the spool); resolves when it is durable. */
  flush(): Promise<void>;
  close(): Promise<void>;
}

/** What the database sink needs besides the database. */
export interface DatabaseAuditSinkOptions {
  /** The spool's directory: beside the embedded data directory, or `--audit-spool`. */
  readonly spoolDir: string;
  /** The spool file's bound; 1 GiB by default. */
  readonly spoolMaxBytes?: number;
  readonly flushIntervalMs?: number;
  readonly maxBatch?: number;
  /**
   * Records kept in memory while neither the database nor the spool takes them; 10,000 by default.
   */
  readonly maxInMemory?: number;
  /** Which database the records are for, without credentials: the spool's tag. */
  readonly database?: string;
  /**
   * A folder of replicas' spools (the default for a postgres:// database):
   * those no live process holds, of the same database, are drained into it;
   * and this replica's own, when another live process holds it, is the
   * first free of its numbered alternatives (spoolDir.2, .3 …) instead.
   */
  readonly adoptFrom?: string;
}

type AuditRow = Insertable<AuditRecordsTable> & {
  readonly record_id: string;
  readonly at: Date | string;
};

const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

const isTime = (v: unknown) => typeof v === "string" && !Number.isNaN(Date.parse(v));
const optional = (v: unknown, test: (v: unknown) => boolean) =>
  v === undefined || v === null || test(v);
const isText = (v: unknown) => typeof v === "string";
const textColumns = [
  "action",
  "target",
  "spiffe_id",
  "certificate_serial",
  "certificate_sha256",
  "remote_address",
  "delegate",
  "person_claim",
] as const;

/**
 * Whether a spool line is a row the database takes: a record id, a time, a
 * route, a decision and a reason, and every other column of its type or
 * absent. Anything else would fail the whole batch's insert, and with it
 * every row behind it, so it is quarantined instead.
 */
export function isAuditRow(value: unknown): value is AuditRow {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return false;
  const r = value as Record<string, unknown>;
  return (
    typeof r.record_id === "string" &&
    uuid.test(r.record_id) &&
    isTime(r.at) &&
    isText(r.route) &&
    (r.decision === "allow" || r.decision === "deny") &&
    isText(r.reason) &&
    (r.kind === undefined || r.kind === "decision" || r.kind === "action") &&
    (r.count === undefined || (Number.isSafeInteger(r.count) && (r.count as number) >= 1)) &&
    optional(r.certificate_not_after, isTime) &&
    optional(r.last_at, isTime) &&
    textColumns.every((c) => optional(r[c], isText))
  );
}

/** The columns with defaults: a row of a hand-written spool may leave them out. */
const rowDefaults = { kind: "decision", count: 1 } as const satisfies Partial<AuditRow>;
/** Every column a row of toRow sets. */
const auditColumns = [
  "record_id",
  "at",
  "kind",
  "action",
  "target",
  "route",
  "decision",
  "reason",
  "spiffe_id",
  "certificate_serial",
  "certificate_sha256",
  "certificate_not_after",
  "remote_address",
  "delegate",
  "person_claim",
  "count",
  "last_at",
] as const satisfies readonly (keyof AuditRow)[];
const auditColumnList = sql.join(auditColumns.map((c) => sql.ref(c)));

/**
 * A JSON.stringify replacer: every text as Postgres can store it, a lone surrogate or a NUL as
 * U+FFFD. JSON.stringify writes those as \uD800 or \u0000 escapes, which jsonb refuses, and with
 * them the whole batch: one record's odd text must not hold back the audit trail.
 */
function wellFormedText(_key: string, value: unknown): unknown {
  if (typeof value !== "string") return value;
  const text = (value as string & { toWellFormed(): string }).toWellFormed();
  return text.includes("\0") ? text.replaceAll("\0", "\uFFFD") : text;
}

/**
 * What JSON.stringify writes for a NUL or a lone surrogate (a literal "\\u0000" in a text matches
 * too: harmless).
 */
const escapedOddText = /\\u0000|\\ud[89a-f]/i;

/**
 * The row with the defaulted columns: a row of a hand-written spool may leave them out, toRow's
 * have them. Not `{ ...rowDefaults, ...r }` for every row: a spread over properties already set
 * took V8 ~30 µs a row here, against ~0.4 for Object.assign and nothing when they are present.
 */
function withDefaults(r: AuditRow): AuditRow {
  return r.kind !== undefined && r.count !== undefined ? r : Object.assign({}, rowDefaults, r);
}

/** The client's message while audit records cannot be stored. */
export const auditUnavailableMessage =
  "the audit trail cannot be written, so this control plane refuses " +
  "requests rather than answer them unrecorded; retry later";

const backlogLogIntervalMs = 30_000;
/** How often a replica looks for spools no live process holds (and once at start). */
const adoptIntervalMs = 60_000;
/**
 * Numbered alternatives of a default spool tried when live replicas hold it (several on port 0).
 */
const spoolAlternates = 16;

/**
 * Buffers records and writes them in batches: one INSERT per flush instead of
 * one per request keeps the audit off the claim path's latency. Records the
 * database refuses go to the spool (fsynced) and are written from there, in
 * order and before any newer record, once it takes them again; every row
 * carries its record id and is inserted `on conflict do nothing`, so a replay
 * after a crash or a lost commit reply stores it once. A crash loses at most
 * the records of the last flush interval that were not yet in the spool.
 */
export async function createDatabaseAuditSink(
  db: Kysely<Database>,
  options: DatabaseAuditSinkOptions,
): Promise<AuditSink> {
  const maxBatch = options.maxBatch ?? 500;
  const maxInMemory = options.maxInMemory ?? 10_000;
  const database = options.database ?? "unnamed";
  const spool = await openAuditSpool<AuditRow>({
    dir: options.spoolDir,
    maxBytes: options.spoolMaxBytes ?? 2 ** 30,
    timeOf: (r) => new Date(r.at),
    isRow: isAuditRow,
    database,
    alternates: options.adoptFrom ? spoolAlternates : 0,
  });
  const holder = `pid ${spool.holder.pid} on ${spool.holder.hostname}, started ${spool.holder.startedAt}`;
  // The queue, oldest first: the spool's rows, then the buffer's. Only drain() (one at a time)
  // moves rows.
  const buffer: AuditRow[] = [];
  let databaseFailure: string | undefined;
  let spoolFailure: string | undefined;
  let spoolUnreadable: string | undefined;
  let adoptedAt = 0;
  let adoptionFailure = "";
  let dropped = 0;
  let backlogLoggedAt = 0;
  let writing: Promise<void> = Promise.resolve();
  if (spool.records > 0)
    console.error(
      `audit: ${describe()} from an earlier run; writing them to the database before any new record`,
    );
  const timer = setInterval(() => void flush(), options.flushIntervalMs ?? 200);
  timer.unref();

  function describe(): string {
    const when = spool.oldest ? `, the oldest from ${spool.oldest.toISOString()}` : "";
    return `${spool.records} records (${spool.bytes} bytes) wait in the spool ${spool.path}${when}`;
  }

  async function drain(): Promise<void> {
    let unreadable: unknown;
    try {
      try {
        while (spool.records > 0) {
          const rows = await spool.peek(maxBatch);
          if (rows.length > 0) await insert(rows);
          await spool.take(rows.length);
        }
      } catch (err) {
        if (err instanceof DatabaseRefused) throw err;
        // A spool that cannot be read holds back only its own records: newer ones go
        // straight to the database, out of order with them but never unrecorded.
        unreadable = err;
      }
      while (buffer.length > 0) {
        const rows = buffer.slice(0, maxBatch);
        await insert(rows);
        buffer.splice(0, rows.length);
      }
    } catch (err) {
      if (!(err instanceof DatabaseRefused)) return spoolBroken(err);
      databaseDown(err.message);
      await spoolBuffer();
      return;
    }
    spoolReadable(unreadable);
    databaseUp();
    if (options.adoptFrom && Date.now() - adoptedAt >= adoptIntervalMs) {
      adoptedAt = Date.now();
      const { failures } = await adoptOrphanSpools({
        root: options.adoptFrom,
        own: dirname(spool.path),
        database,
        isRow: isAuditRow,
        timeOf: (r) => new Date(r.at),
        maxBatch,
        store: insert,
      });
      // Tried again at the next interval; said once until it changes.
      const failed = failures.join("; ");
      if (failed && failed !== adoptionFailure)
        console.error(
          `audit: cannot adopt an orphaned spool yet (${failed}); trying again every minute`,
        );
      adoptionFailure = failed;
    }
  }

  /** Says once that the spool cannot be read, and once that it can again. */
  function spoolReadable(err: unknown): void {
    if (err === undefined) {
      if (spoolUnreadable !== undefined)
        console.error(`audit: the spool ${spool.path} can be read again; writing its records`);
      spoolUnreadable = undefined;
      return;
    }
    const message = errorMessage(err);
    if (spoolUnreadable === undefined)
      console.error(
        `audit: cannot read the spool ${spool.path} (${message}); its ` +
          `${spool.records} records wait there and newer ones go straight to the ` +
          `database`,
      );
    spoolUnreadable = message;
  }

  // The spool cannot be read, written or emptied: what it has not taken stays in memory, and
  // requests are refused.
  function spoolBroken(err: unknown): void {
    const message = errorMessage(err);
    if (spoolFailure === undefined)
      console.error(
        `audit: cannot use the spool ${spool.path} ` +
          `(${message})${databaseFailure ? ` and the database refuses records (${databaseFailure})` : ""}; ` +
          `refusing requests with 503 until audit records can be stored`,
      );
    spoolFailure = message;
  }

  async function insert(rows: readonly AuditRow[]): Promise<void> {
    try {
      // One jsonb parameter for the batch: a parameter per value (15 a row, up to 500 rows) cost
      // more CPU to build and send than the records are worth (docs/performance.md, connections).
      const batch = rows.map(withDefaults);
      // The replacer only when there is odd text to mend: it runs for every key of every row.
      const plain = JSON.stringify(batch);
      const json = escapedOddText.test(plain) ? JSON.stringify(batch, wellFormedText) : plain;
      await sql`
        insert into audit_records (${auditColumnList})
        select ${auditColumnList} from jsonb_populate_recordset(null::audit_records, ${json}::jsonb)
        on conflict (record_id) do nothing`.execute(db);
    } catch (err) {
      throw new DatabaseRefused((err as Error).message);
    }
  }

  async function spoolBuffer(): Promise<void> {
    if (buffer.length > 0) {
      // What record() adds during the append stays in the buffer, behind what the spool took.
      const rows = buffer.slice();
      try {
        await spool.append(rows);
        buffer.splice(0, rows.length);
      } catch (err) {
        return spoolBroken(err);
      }
    }
    if (spoolFailure !== undefined) {
      console.error(
        `audit: the spool ${spool.path} takes records again; serving requests (${describe()})`,
      );
      spoolFailure = undefined;
    }
    if (Date.now() - backlogLoggedAt >= backlogLogIntervalMs && spool.records > 0) {
      backlogLoggedAt = Date.now();
      console.error(`audit: ${describe()}; the database refuses them: ${databaseFailure}`);
    }
  }

  function databaseDown(message: string): void {
    if (databaseFailure === undefined) {
      console.error(
        `audit: the database refuses audit records (${message}); keeping them in ` +
          `the spool ${spool.path} until it takes them`,
      );
      backlogLoggedAt = Date.now();
    }
    databaseFailure = message;
  }

  function databaseUp(): void {
    if (databaseFailure === undefined && spoolFailure === undefined) return;
    console.error(
      `audit: the database stores audit records again; every spooled record is ` +
        `written` +
        `${dropped ? `; ${dropped} records could not be kept while neither the database nor the spool took them` : ""}`,
    );
    databaseFailure = spoolFailure = undefined;
    dropped = 0;
  }

  function flush(): Promise<void> {
    writing = writing
      .then(drain)
      .catch((err: unknown) =>
        console.error(`audit: writing records failed: ${(err as Error).message}`),
      );
    return writing;
  }

  return {
    record(record) {
      if (spoolFailure !== undefined && buffer.length >= maxInMemory) {
        dropped++;
        return;
      }
      buffer.push(toRow(record));
      if (buffer.length >= maxBatch) void flush();
    },
    unavailable: () => (spoolFailure === undefined ? undefined : auditUnavailableMessage),
    backlog: () => ({
      inMemory: buffer.length,
      spooled: spool.records,
      spoolBytes: spool.bytes,
      spoolPath: spool.path,
      spoolHolder: holder,
      quarantined: spool.quarantined,
      quarantinedHere: spool.quarantinedHere,
      quarantinePath: spool.quarantinePath,
      spoolUnreadable,
      oldestUnwritten: spool.oldest ?? (buffer[0] ? new Date(buffer[0].at) : undefined),
    }),
    flush,
    async close() {
      clearInterval(timer);
      await flush();
      if (buffer.length > 0)
        console.error(
          `audit: ${buffer.length} records could be stored neither in the database ` +
            `nor in the spool ${spool.path}; they are lost`,
        );
      else if (spool.records > 0)
        console.error(`audit: closing with ${describe()}; the next start writes them first`);
      spool.close();
    },
  };
}

/** An error's message, led by its code (ENOSPC, EACCES) when the message does not say it. */
function errorMessage(err: unknown): string {
  const code = (err as NodeJS.ErrnoException).code;
  const message = (err as Error).message;
  return code && !message.startsWith(code) ? `${code}: ${message}` : message;
}

/** The database did not take a batch; the batch goes to the spool. */
class DatabaseRefused extends Error {}

function toRow(r: AuditRecord): AuditRow & Record<(typeof auditColumns)[number], unknown> {
  return {
    record_id: randomUUID(),
    at: r.at,
    kind: r.kind ?? rowDefaults.kind,
    action: r.action ?? null,
    target: r.target ?? null,
    route: r.route,
    decision: r.decision,
    reason: r.reason,
    spiffe_id: r.spiffeId ?? r.certificate?.uri ?? null,
    certificate_serial: r.certificate?.serialHex ?? null,
    certificate_sha256: r.certificate?.fingerprintSha256 ?? null,
    certificate_not_after: r.certificate?.notAfter ?? null,
    remote_address: r.remoteAddress ?? null,
    delegate: r.delegate ?? null,
    person_claim: r.personClaim ?? null,
    count: r.count ?? rowDefaults.count,
    last_at: r.lastAt ?? null,
  };
}
