import type { AuditRecord, AuditSink } from "./audit.js";

/** How refusals are aggregated. */
export interface RefusalAggregationOptions {
  /** The aggregation interval; 1 s by default. */
  readonly intervalMs?: number;
  /**
   * Sources tracked at once; past it, what is counted is written at once (bounded memory). 10,000
   * by default.
   */
  readonly maxSources?: number;
}

interface Repeats {
  first: AuditRecord;
  count: number;
  lastAt: Date;
}

/**
 * Keeps a flood of refusals from becoming a flood of rows. A refusal (decision
 * "deny", of a request or an action) is written at once when it is the first
 * of its kind from its source in the current interval; the repeats in that
 * interval become one record when it ends: the first repeat's fields, with
 * `count` and `lastAt`. The kind is (record kind, action, reason); the source
 * is the certificate's SHA-256 fingerprint, or the client address without
 * one. Routes are not part of the key (a REST path holds ids a client
 * chooses), so an aggregated record names the route of its first request.
 * Allowed decisions and actions pass through, one record each. A source that
 * refuses all the time thus writes at most two rows per interval per kind.
 */
export function aggregateRefusals(
  sink: AuditSink,
  options: RefusalAggregationOptions = {},
): AuditSink {
  const maxSources = options.maxSources ?? 10_000;
  const intervalMs = options.intervalMs ?? 1000;
  // Every key seen in this interval; with the repeats counted since its first refusal.
  let open = new Map<string, Repeats | undefined>();
  const timer = setInterval(emit, intervalMs);
  timer.unref();

  function emit(): void {
    const closing = open;
    open = new Map();
    for (const repeats of closing.values()) {
      if (repeats) sink.record({ ...repeats.first, count: repeats.count, lastAt: repeats.lastAt });
    }
  }

  return {
    record(record) {
      if (record.decision !== "deny") return sink.record(record);
      const source = record.certificate
        ? `sha256:${record.certificate.fingerprintSha256}`
        : `address:${record.remoteAddress ?? ""}`;
      const key = [record.kind ?? "decision", record.action ?? "", record.reason, source].join(
        "\u0000",
      );
      if (!open.has(key)) {
        if (open.size >= maxSources) emit();
        open.set(key, undefined);
        return sink.record(record);
      }
      const repeats = open.get(key);
      if (repeats && record.at.getTime() - repeats.first.at.getTime() >= intervalMs) {
        // The timer runs late on a busy process: a repeat past the interval starts the next
        // record, so one record never spans more than one interval.
        sink.record({ ...repeats.first, count: repeats.count, lastAt: repeats.lastAt });
        open.set(key, { first: record, count: 1, lastAt: record.at });
      } else if (repeats) {
        repeats.count++;
        repeats.lastAt = record.at;
      } else {
        open.set(key, { first: record, count: 1, lastAt: record.at });
      }
    },
    unavailable: () => sink.unavailable(),
    backlog: () => sink.backlog(),
    async flush() {
      // What is counted so far is written; the interval goes on (the next repeat is counted, not
      // written at once).
      for (const [key, repeats] of open) {
        if (!repeats) continue;
        sink.record({ ...repeats.first, count: repeats.count, lastAt: repeats.lastAt });
        open.set(key, undefined);
      }
      await sink.flush();
    },
    async close() {
      clearInterval(timer);
      emit();
      await sink.close();
    },
  };
}
