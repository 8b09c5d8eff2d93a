import type { Kysely } from "kysely";
import type { Database } from "../store/schema.js";
import type { CertificateFacts } from "./certificate-policy.js";

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
  readonly certificate?: CertificateFacts;
  readonly remoteAddress?: string;
}

/** Where audit records go. record() never blocks a request. */
export interface AuditSink {
  record(record: AuditRecord): void;
  /** Writes what is buffered; resolves when it is stored. */
  flush(): Promise<void>;
  close(): Promise<void>;
}

/**
 * Buffers records and writes them in batches: one INSERT per flush instead of
 * one per request keeps the audit off the claim path's latency. A crash loses
 * at most the last flush interval of records.
 */
export function createDatabaseAuditSink(db: Kysely<Database>, options: { flushIntervalMs?: number; maxBatch?: number } = {}): AuditSink {
  const maxBatch = options.maxBatch ?? 500;
  let buffer: AuditRecord[] = [];
  let writing: Promise<void> = Promise.resolve();
  const timer = setInterval(() => void flush(), options.flushIntervalMs ?? 200);
  timer.unref();

  function flush(): Promise<void> {
    writing = writing.then(async () => {
      while (buffer.length > 0) {
        const batch = buffer.slice(0, maxBatch);
        buffer = buffer.slice(batch.length);
        try {
          await db.insertInto("audit_records").values(batch.map(toRow)).execute();
        } catch (err) {
          console.error(`audit: could not store ${batch.length} records: ${(err as Error).message}`);
        }
      }
    });
    return writing;
  }

  return {
    record(record) {
      buffer.push(record);
      if (buffer.length >= maxBatch) void flush();
    },
    flush,
    async close() {
      clearInterval(timer);
      await flush();
    },
  };
}

function toRow(r: AuditRecord) {
  return {
    at: r.at,
    kind: r.kind ?? ("decision" as const),
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
  };
}
