import { collectBlobs } from "../artifacts/gc.js";
import type { BlobStore } from "../artifacts/store.js";
import type { Store } from "../store/database.js";
import { logUnlessUnreachable } from "../store/unreachable.js";
import { pruneJobs } from "./prune-jobs.js";
import {
  defaultRetentions,
  pruneStatements,
  retentionKinds,
  type PruneStatement,
  type RetentionKind,
  type Retentions,
} from "./retention-kinds.js";

/** What a prune reports as it deletes, for the metrics (src/server/metrics/). */
export interface RetentionObserver {
  /** One statement deleted `rows` rows of `kind` (jobs: retry chains' jobs and pipelines). */
  pruned(kind: RetentionKind, rows: number): void;
  /** The artifact garbage collector deleted blobs of `bytes` bytes in all. */
  reclaimed(bytes: number): void;
  /** A prune of `kind` failed; the next run tries again. */
  failed(kind: RetentionKind): void;
}

/** What this replica's prunes of one kind did since it started. */
export interface RetentionReport {
  readonly kind: RetentionKind;
  readonly retentionMs: number;
  /** Rows (blobs: blobs) deleted by this replica since it started. */
  readonly pruned: number;
  /** Blobs only: the bytes those blobs held. */
  readonly reclaimedBytes?: number;
  /** When its last prune run ended, if one did. */
  readonly lastRunAt?: Date;
  /** Why its last run failed, if it did. */
  readonly lastError?: string;
}

/** Options of the retention pruner. */
export interface RetentionOptions {
  readonly store: Store;
  /** The artifact blobs to collect garbage from; none collected without it. */
  readonly blobs?: BlobStore;
  /**
   * How long each kind is kept, in milliseconds; each omitted takes its default. `forelead serve`
   * refuses values under each kind's minimum (retention-kinds.ts); tests may go lower.
   */
  readonly retentions?: Partial<Retentions>;
  /** About how often every kind is pruned (each run jittered by ±50 %); 10 minutes by default. */
  readonly pruneIntervalMs?: number;
  readonly observer?: RetentionObserver;
}

/** Keeps every kind of record within its retention (docs/retention.md). */
export interface Retention {
  readonly retentions: Retentions;
  /** Prunes every kind until none has rows past its retention; the rows deleted per kind. */
  pruneAll(): Promise<Record<RetentionKind, number>>;
  /** This replica's prunes, per kind, for the doctor. */
  report(): RetentionReport[];
  close(): Promise<void>;
}

/**
 * Rows one statement deletes: few enough that it holds few locks and commits within milliseconds,
 * so claims and stream writes never wait long behind it. Jobs are counted by retry chain, each
 * with its lines: 100 jobs with 2,000 lines took ~21 ms a batch (docs/performance.md, section 12).
 */
const batchRows = 1_000;
const batchJobs = 100;

/**
 * Starts the pruner: every replica runs it, at jittered times; the prune statements pick their
 * rows with SKIP LOCKED, so replicas share the work instead of fighting over it.
 */
export function createRetention(options: RetentionOptions): Retention {
  const { db } = options.store;
  const retentions: Retentions = { ...defaultRetentions };
  for (const kind of retentionKinds) {
    const ms = options.retentions?.[kind];
    if (ms === undefined) continue;
    if (!Number.isFinite(ms) || ms <= 0)
      throw new Error(`the ${kind} retention must be a positive duration; got ${ms} ms`);
    (retentions as Record<RetentionKind, number>)[kind] = ms;
  }
  const reports = new Map<RetentionKind, Omit<RetentionReport, "kind" | "retentionMs">>(
    retentionKinds.map((k) => [k, { pruned: 0 }]),
  );
  const intervalMs = options.pruneIntervalMs ?? 600_000;
  let closed = false;

  let reclaimedBytes = 0;
  const collect: PruneStatement = async (db, graceMs) => {
    if (!options.blobs) return 0;
    const collected = await collectBlobs(db, options.blobs, graceMs);
    reclaimedBytes += collected.bytes;
    if (collected.bytes > 0) options.observer?.reclaimed(collected.bytes);
    return collected.blobs;
  };
  const statementOf = (kind: RetentionKind): [PruneStatement, number] =>
    kind === "jobs"
      ? [pruneJobs, batchJobs]
      : kind === "blobs"
        ? [collect, Infinity]
        : [pruneStatements[kind], batchRows];

  const pruneKind = async (kind: RetentionKind) => {
    const [statement, batch] = statementOf(kind);
    let total = 0;
    try {
      for (;;) {
        const n = await statement(db, retentions[kind], batch);
        total += n;
        if (n > 0) options.observer?.pruned(kind, n);
        if (n < batch || closed) break;
      }
      reports.set(kind, { pruned: reports.get(kind)!.pruned + total, lastRunAt: new Date() });
    } catch (err) {
      options.observer?.failed(kind);
      reports.set(kind, {
        pruned: reports.get(kind)!.pruned + total,
        lastRunAt: new Date(),
        lastError: err instanceof Error ? err.message : String(err),
      });
      logUnlessUnreachable(`retention: pruning ${kind} failed`, err);
    }
    return total;
  };

  let running: Promise<unknown> = Promise.resolve();
  const pruneAll = () => {
    const run = running.then(async () => {
      const out = {} as Record<RetentionKind, number>;
      for (const kind of retentionKinds) out[kind] = closed ? 0 : await pruneKind(kind);
      return out;
    });
    running = run;
    return run;
  };

  let timer: NodeJS.Timeout | undefined;
  const schedule = () => {
    timer = setTimeout(
      () => {
        void pruneAll().then(() => {
          if (!closed) schedule();
        });
      },
      intervalMs * (0.5 + Math.random()),
    );
    timer.unref();
  };
  schedule();

  return {
    retentions,
    pruneAll,
    report: () =>
      retentionKinds.map((kind) => ({
        kind,
        retentionMs: retentions[kind],
        ...reports.get(kind)!,
        reclaimedBytes: kind === "blobs" ? reclaimedBytes : undefined,
      })),
    async close() {
      if (closed) return;
      closed = true;
      clearTimeout(timer);
      await running;
    },
  };
}
