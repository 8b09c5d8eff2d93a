import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import type { DescMethod } from "@bufbuild/protobuf";
import type { ContextValues } from "@connectrpc/connect";
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";
import { calledMethodKey } from "../../api/context.js";
import { refusalReasons, type RefusalReason } from "../../api/guard.js";
import { routeOf } from "../../api/routes.js";
import type { BrokerObserver } from "../../broker/observer.js";
import { runnerStates } from "../../broker/fleet/state.js";
import type { GroupDemand } from "../../broker/fleet/demand.js";
import type { AuditSink } from "../../identity/audit.js";
import type { Store } from "../../store/database.js";
import type { RetentionObserver } from "../../ops/retention.js";
import { retentionKinds } from "../../ops/retention-kinds.js";
import { createDatabaseSampler, type DatabaseSample } from "./database-sample.js";
import { checkReadiness, type ReadinessCheck } from "./readiness.js";

/** What the metrics read and how often the database is asked. */
export interface MetricsOptions {
  readonly store: Store;
  readonly audit: AuditSink;
  /** Scrapes within this many milliseconds share one database sample; 1000 by default. */
  readonly sampleTtlMs?: number;
  /** A runner silent this long is offline (forelead_runner_state). */
  readonly runnerOfflineSeconds: number;
}

/**
 * The control plane's metrics: one prom-client Registry of its own (two
 * control planes in one process do not share counters), the hooks the broker,
 * the guard and the request handler call, and readiness. Built once in the
 * composition root (buildDomain) and handed to what reports to it; the
 * metrics listener (./http.ts) serves it.
 */
export interface Metrics {
  readonly registry: Registry;
  /** What the broker reports to. */
  readonly broker: BrokerObserver;
  /** What the retention pruner reports to. */
  readonly retention: RetentionObserver;
  /** What the guard reports refusals to. */
  readonly refused: (reason: RefusalReason) => void;
  /**
   * Times one API request from now until its stream closes, labelled by the method the guard saw.
   */
  readonly watchRequest: (
    req: Http2ServerRequest,
    res: Http2ServerResponse,
    values: ContextValues,
  ) => void;
  /**
   * Adds Node's process metrics (process_*, nodejs_*: CPU, memory, event loop, GC), under their
   * usual names: once, when the metrics are served.
   */
  collectProcessMetrics(): void;
  readiness(): Promise<ReadinessCheck[]>;
  close(): void;
}

/**
 * Settlement outcomes: the job's final state, or requeued (a retryable failure with attempts left).
 */
const outcomes = ["succeeded", "failed", "cancelled", "requeued"] as const;

/**
 * Request buckets in seconds: from a fast unary call up to a long-poll claim (20 s) and a stream's
 * 30 s bound.
 */
const requestBuckets = [
  0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60,
];
/** Claim-wait buckets in seconds, up to the longest wait a claim may ask for (20 s). */
const claimBuckets = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 15, 20, 25];

/** Creates the metrics of one control plane. */
export function createMetrics(options: MetricsOptions): Metrics {
  const { store, audit } = options;
  const registry = new Registry();
  const registers = [registry];
  const sampleDatabase = createDatabaseSampler(
    store.db,
    options.sampleTtlMs ?? 1000,
    options.runnerOfflineSeconds,
  );

  const granted = new Counter({
    name: "forelead_leases_granted_total",
    help: "Leases granted to claims.",
    registers,
  });
  const handedOff = new Counter({
    name: "forelead_leases_handed_off_total",
    help:
      "Leases an enqueue granted in its own statement to a claim waiting on " +
      "this replica (the direct handoff); also counted in " +
      "forelead_leases_granted_total.",
    registers,
  });
  const claimsWaiting = new Gauge({
    name: "forelead_claims_waiting",
    help: "Long-poll claims waiting for a job on this replica now.",
    registers,
  });
  const renewed = new Counter({
    name: "forelead_leases_renewed_total",
    help: "Live leases extended by a renew.",
    registers,
  });
  const expired = new Counter({
    name: "forelead_leases_expired_total",
    help: "Leases the expiry sweep ended: expired, or past the job's timeout.",
    registers,
  });
  const settlements = new Counter({
    name: "forelead_settlements_total",
    help:
      "Jobs settled under a lease, by outcome (a completion, or the expiry " +
      "sweep); requeued: a retryable failure with attempts left.",
    labelNames: ["outcome"],
    registers,
  });
  const claimWait = new Histogram({
    name: "forelead_claim_wait_seconds",
    help: "How long a claim waited, by result: lease (one was granted) or none (it timed out or was cancelled).",
    labelNames: ["result"],
    buckets: claimBuckets,
    registers,
  });
  const refusals = new Counter({
    name: "forelead_identity_refusals_total",
    help: "Requests the identity guard refused, by reason.",
    labelNames: ["reason"],
    registers,
  });
  const requests = new Histogram({
    name: "forelead_request_duration_seconds",
    help:
      "API requests from arrival until their stream closed, by route (the REST " +
      "route template, on both surfaces; unmatched: no route), surface (rest, " +
      "rpc) and HTTP status code.",
    labelNames: ["route", "surface", "code"],
    buckets: requestBuckets,
    registers,
  });

  const pruned = new Counter({
    name: "forelead_retention_pruned_total",
    help:
      "Rows this replica deleted past their retention, by kind (jobs: jobs and pipelines, each " +
      "with everything hanging off it); every kind is present, 0 when none was pruned.",
    labelNames: ["kind"],
    registers,
  });
  const pruneFailures = new Counter({
    name: "forelead_retention_prune_failures_total",
    help: "Prune runs of a kind that failed on this replica (the next run tries again), by kind.",
    labelNames: ["kind"],
    registers,
  });
  const reclaimed = new Counter({
    name: "forelead_artifact_bytes_reclaimed_total",
    help: "Bytes of artifact blobs this replica's garbage collector deleted.",
    registers,
  });
  for (const kind of retentionKinds) {
    pruned.labels(kind).inc(0);
    pruneFailures.labels(kind).inc(0);
  }

  // Children made once per label set: the hot path only looks them up and increments.
  const settled = Object.fromEntries(outcomes.map((o) => [o, settlements.labels(o)])) as Record<
    string,
    Counter.Internal
  >;
  const refusedBy = Object.fromEntries(
    refusalReasons.map((r) => [r, refusals.labels(r)]),
  ) as Record<RefusalReason, Counter.Internal>;
  const claimGranted = claimWait.labels("lease");
  const claimNone = claimWait.labels("none");
  type Child = Histogram.Internal<"route" | "surface" | "code">;
  const byMethod = new WeakMap<
    DescMethod,
    { route: string; rest: Map<number, Child>; rpc: Map<number, Child> }
  >();
  const unmatched = {
    route: "unmatched",
    rest: new Map<number, Child>(),
    rpc: new Map<number, Child>(),
  };
  const requestChild = (method: DescMethod | undefined, url: string, status: number): Child => {
    let entry = method ? byMethod.get(method) : unmatched;
    if (!entry && method) {
      const option = routeOf(method);
      byMethod.set(
        method,
        (entry = { route: `${option.method} ${option.path}`, rest: new Map(), rpc: new Map() }),
      );
    }
    const surface = url.startsWith("/v1/") ? "rest" : "rpc";
    const children = entry![surface];
    let child = children.get(status);
    if (!child)
      children.set(status, (child = requests.labels(entry!.route, surface, String(status))));
    return child;
  };

  // Read at scrape: the queue (one cached query), the database, the pool, LISTEN, the audit
  // backlog. Each gauge of the queue reads the one shared sample (a scrape collects its metrics
  // side by side).
  const sampled = (
    name: string,
    help: string,
    set: (gauge: Gauge<string>, sample: DatabaseSample) => void,
    labelNames: string[] = [],
  ) =>
    new Gauge({
      name,
      help,
      labelNames,
      registers,
      async collect() {
        const sample = await sampleDatabase();
        this.reset();
        set(this, sample);
      },
    });
  sampled(
    "forelead_jobs_queued",
    "Queued jobs, by workspace.",
    (g, s) => s.workspaces.forEach((w) => g.labels(w.workspaceId).set(w.queued)),
    ["workspace"],
  );
  sampled(
    "forelead_jobs_running",
    "Running (leased) jobs, by workspace.",
    (g, s) => s.workspaces.forEach((w) => g.labels(w.workspaceId).set(w.running)),
    ["workspace"],
  );
  sampled(
    "forelead_jobs_waiting_input",
    "Jobs suspended until their input request is answered, by workspace.",
    (g, s) => s.workspaces.forEach((w) => g.labels(w.workspaceId).set(w.waitingInput)),
    ["workspace"],
  );
  sampled(
    "forelead_jobs_oldest_queued_age_seconds",
    "Seconds since the oldest queued job of the workspace was enqueued.",
    (g, s) =>
      s.workspaces.forEach(
        (w) =>
          w.oldestQueuedSeconds !== undefined && g.labels(w.workspaceId).set(w.oldestQueuedSeconds),
      ),
    ["workspace"],
  );
  sampled(
    "forelead_runners",
    "Registered runners, by state (idle, busy, paused, draining, offline, retired): every state " +
      "is present, 0 when no runner is in it.",
    (g, s) => {
      if (!s.reachable) return;
      for (const state of runnerStates) g.labels(state).set(s.runners.get(state) ?? 0);
    },
    ["state"],
  );
  // Per registered scaling group (GET /v1/admin/demand's figures), for autoscalers that read
  // Prometheus.
  const groupFigures: ReadonlyArray<[string, string, (d: GroupDemand) => number]> = [
    [
      "jobs_queued",
      "Queued jobs, due now, that the group's runners could take.",
      (d) => d.jobsQueued,
    ],
    ["jobs_running", "Jobs running on the group's runners.", (d) => d.jobsRunning],
    ["runners", "The group's runners, not offline or retired.", (d) => d.runners],
    ["runners_idle", "The group's idle runners.", (d) => d.runnersIdle],
    ["slots_free", "Free slots of runners that offer what the group offers.", (d) => d.slotsFree],
    [
      "oldest_wait_seconds",
      "Seconds the oldest of the group's queued jobs has waited.",
      (d) => d.oldestWaitSeconds,
    ],
    [
      "wanted_runners",
      "More runners the group needs now, within its min and max.",
      (d) => d.wantedRunners,
    ],
  ];
  for (const [figure, help, value] of groupFigures)
    sampled(
      `forelead_autoscale_group_${figure}`,
      `${help} By scaling group.`,
      (g, s) => s.groups.forEach((d) => g.labels(d.group.name, d.group.workspaceId).set(value(d))),
      ["group", "workspace"],
    );
  sampled(
    "forelead_database_reachable",
    "1 when the database answered the scrape's select 1, else 0 (the queue gauges are then absent).",
    (g, s) => g.set(s.reachable ? 1 : 0),
  );
  sampled(
    "forelead_database_round_trip_seconds",
    "How long the scrape's select 1 took (0 while unreachable).",
    (g, s) => s.roundTripSeconds !== undefined && g.set(s.roundTripSeconds),
  );
  new Gauge({
    name: "forelead_database_pool_connections",
    help: "Connections of the Postgres pool, by state (in_use, idle); absent on the embedded database.",
    labelNames: ["state"],
    registers,
    collect() {
      const use = store.poolUse();
      if (!use) return;
      this.labels("in_use").set(use.total - use.idle);
      this.labels("idle").set(use.idle);
    },
  });
  new Gauge({
    name: "forelead_database_pool_max_connections",
    help: "The Postgres pool's bound (0 on the embedded database).",
    registers,
    collect() {
      this.set(store.poolUse()?.max ?? 0);
    },
  });
  new Gauge({
    name: "forelead_database_pool_waiting_requests",
    help: "Queries waiting for a pool connection.",
    registers,
    collect() {
      this.set(store.poolUse()?.waiting ?? 0);
    },
  });
  new Gauge({
    name: "forelead_listen_connected",
    help: "1 while the LISTEN connection is up (always on the embedded database).",
    registers,
    collect() {
      this.set(store.listening ? 1 : 0);
    },
  });
  new Gauge({
    name: "forelead_audit_spool_bytes",
    help: "Bytes of audit records in the spool, waiting for the database.",
    registers,
    collect() {
      this.set(audit.backlog().spoolBytes);
    },
  });
  new Gauge({
    name: "forelead_audit_spool_records",
    help: "Audit records in the spool, waiting for the database.",
    registers,
    collect() {
      this.set(audit.backlog().spooled);
    },
  });
  new Counter({
    name: "forelead_audit_spool_quarantined_records_total",
    help: "Spool lines this process moved to the quarantine file: torn, not JSON, or not an audit row.",
    registers,
    collect() {
      this.reset();
      this.inc(audit.backlog().quarantinedHere);
    },
  });
  new Gauge({
    name: "forelead_audit_spool_quarantine_records",
    help: "Lines in the spool's quarantine file, set aside for an operator (0 when none).",
    registers,
    collect() {
      this.set(audit.backlog().quarantined);
    },
  });
  new Gauge({
    name: "forelead_audit_buffered_records",
    help: "Audit records in memory, waiting for the next write.",
    registers,
    collect() {
      this.set(audit.backlog().inMemory);
    },
  });
  new Gauge({
    name: "forelead_audit_oldest_unwritten_age_seconds",
    help: "Seconds since the oldest audit record not yet in the database was made (0 when none waits).",
    registers,
    collect() {
      const oldestUnwritten = audit.backlog().oldestUnwritten;
      this.set(oldestUnwritten ? Math.max(0, (Date.now() - oldestUnwritten.getTime()) / 1000) : 0);
    },
  });
  new Gauge({
    name: "forelead_audit_writable",
    help: "1 while audit records can be stored (database or spool); 0 means requests are refused.",
    registers,
    collect() {
      this.set(audit.unavailable() ? 0 : 1);
    },
  });

  let processMetrics = false;
  return {
    registry,
    broker: {
      claimEnded(wasGranted, waitedMs) {
        if (wasGranted) granted.inc();
        (wasGranted ? claimGranted : claimNone).observe(waitedMs / 1000);
      },
      claimWaiting: (delta) => claimsWaiting.inc(delta),
      handedOff: () => handedOff.inc(),
      renewed: () => renewed.inc(),
      settled: (state) => settled[state === "queued" ? "requeued" : state]?.inc(),
      swept(jobs) {
        expired.inc(jobs.length);
        for (const job of jobs) if (job.state !== "queued") settled[job.state]?.inc();
      },
    },
    retention: {
      pruned: (kind, rows) => pruned.labels(kind).inc(rows),
      reclaimed: (bytes) => reclaimed.inc(bytes),
      failed: (kind) => pruneFailures.labels(kind).inc(),
    },
    refused: (reason) => refusedBy[reason].inc(),
    watchRequest(req, res, values) {
      const startedAt = performance.now();
      res.stream.once("close", () =>
        requestChild(values.get(calledMethodKey), req.url, res.statusCode).observe(
          (performance.now() - startedAt) / 1000,
        ),
      );
    },
    collectProcessMetrics() {
      if (processMetrics) return;
      processMetrics = true;
      collectDefaultMetrics({ register: registry });
    },
    readiness: () => checkReadiness(store, audit),
    close: () => registry.clear(),
  };
}
