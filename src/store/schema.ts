import type { ColumnType, Generated } from "kysely";

/**
 * The database as kysely sees it. int8 columns are read as JS numbers on both
 * dialects (see database.ts); every value stored in them stays below 2^53.
 */
export interface Database {
  runners: RunnersTable;
  audit_records: AuditRecordsTable;
  jobs: JobsTable;
  leases: LeasesTable;
  enrollment_grants: EnrollmentGrantsTable;
  issued_certificates: IssuedCertificatesTable;
  runner_retirements: RunnerRetirementsTable;
  stream_cursors: StreamCursorsTable;
  stream_messages: StreamMessagesTable;
  inventory_reports: InventoryReportsTable;
  inventory_items: InventoryItemsTable;
  inventory_flags: InventoryFlagsTable;
  reap_orders: ReapOrdersTable;
  repositories: RepositoriesTable;
  uploads: UploadsTable;
  artifact_blobs: ArtifactBlobsTable;
  artifact_blob_chunks: ByteChunksTable & { digest: string };
  upload_chunks: ByteChunksTable & { upload_id: string };
  workspace_pauses: WorkspacePausesTable;
  job_peaks: JobPeaksTable;
  replicas: ReplicasTable;
  events: EventsTable;
  job_secrets: JobSecretsTable;
  secrets_keys: SecretsKeysTable;
  job_inputs: JobInputsTable;
  pipelines: PipelinesTable;
  pipeline_steps: PipelineStepsTable;
  pipeline_step_secrets: PipelineStepSecretsTable;
  schedules: SchedulesTable;
  schedule_fires: ScheduleFiresTable;
  schedule_secrets: ScheduleSecretsTable;
  person_sessions: PersonSessionsTable;
  webhook_subscriptions: WebhookSubscriptionsTable;
  webhook_deliveries: WebhookDeliveriesTable;
  fairness_keys: FairnessKeysTable;
  rate_limits: RateLimitsTable;
  scaling_groups: ScalingGroupsTable;
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
  /** Set while the runner is paused: it gets no new lease (forelead_claim). */
  paused_at: ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;
  paused_by: ColumnType<string | null, string | null | undefined, string | null>;
  /** The registered process: random per runner process start; '' when the runner sends none. */
  instance_id: ColumnType<string, string | undefined, string>;
  instance_started_at: ColumnType<
    Date | null,
    Date | string | null | undefined,
    Date | string | null
  >;
  /** Capabilities a job's requirements are matched against (forelead_meets_requirements). */
  os: ColumnType<string, string | undefined, string>;
  execution_kinds: ColumnType<string[], string[] | undefined, string[]>;
  features: ColumnType<string[], string[] | undefined, string[]>;
  max_concurrency: ColumnType<number, number | undefined, number>;
  /** The runner's version as it said at register; '' when it sends none. */
  version: ColumnType<string, string | undefined, string>;
  /** Set while the runner says it drains (it takes no new job and stops after its last one). */
  draining_at: ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;
  /** Who ordered the runner to drain (an admin's SPIFFE ID); kept across its re-registrations. */
  drain_ordered_by: ColumnType<string | null, string | null | undefined, string | null>;
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
  /** For a delegate's call for a person (spiffe_id): the delegate's SPIFFE ID. */
  delegate: ColumnType<string | null, string | null | undefined, string | null>;
  /** For a delegate's call for a person: the identity claim the person signed in with. */
  person_claim: ColumnType<string | null, string | null | undefined, string | null>;
  /** "decision" (a per-request identity decision) or "action" (an administrative action). */
  kind: ColumnType<"decision" | "action", "decision" | "action" | undefined, "decision" | "action">;
  /** For actions: e.g. "job.enqueue", "runner.retire". */
  action: ColumnType<string | null, string | null | undefined, string | null>;
  /** For actions: what was acted on. */
  target: ColumnType<string | null, string | null | undefined, string | null>;
  /**
   * Given when the record is made; null on records stored before the column existed. Unique: a
   * replayed record is stored once.
   */
  record_id: ColumnType<string | null, string | undefined, never>;
  /** How many requests an aggregated refusal stands for; 1 for every other record. */
  count: ColumnType<number, number | undefined, never>;
  /**
   * The last request an aggregated refusal stands for (`at` is the first); null when count is 1.
   */
  last_at: ColumnType<Date | null, Date | string | null | undefined, never>;
}

/** A paused workspace: its queued jobs are not claimed until resumed. */
export interface WorkspacePausesTable {
  workspace_id: string;
  paused_at: Generated<Date>;
  paused_by: string;
  reason: Generated<string>;
}

/**
 * Job states: queued, running and waiting_input (suspended) are live; the other three are settled.
 */
export type JobState =
  "queued" | "running" | "waiting_input" | "succeeded" | "failed" | "cancelled";

/** A job and its current lease. */
export interface JobsTable {
  id: string;
  workspace_id: string;
  labels: string[];
  kind: string;
  repository: string | null;
  target_branch: string | null;
  base_commit: string | null;
  base_tree: string | null;
  spec: ColumnType<JsonObject, string, string>;
  state: JobState;
  priority: number;
  attempts: Generated<number>;
  max_attempts: number;
  idempotency_key: string | null;
  request_sha256: string;
  runner_id: string | null;
  lease_id: number | null;
  lease_token_sha256: Buffer | null;
  lease_expires_at: Date | null;
  cancel_requested: Generated<boolean>;
  exit_code: number | null;
  error: ColumnType<JsonObject | null, string | null, string | null>;
  failure_reason: string | null;
  failure_message: string | null;
  created_at: Generated<Date>;
  updated_at: Generated<Date>;
  settled_at: Date | null;
  /** An agent job's published commit, pushed to published_branch. */
  published_commit: ColumnType<string | null, string | null | undefined, string | null>;
  published_branch: ColumnType<string | null, string | null | undefined, string | null>;
  published_at: ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;
  /** The result manifest recorded by the completion that settled the job. */
  artifacts: ColumnType<JsonObject[] | null, string | null | undefined, string | null>;
  /** The SPIFFE ID that enqueued the job; it may always read and cancel it. */
  enqueued_by: ColumnType<string | null, string | null | undefined, string | null>;
  /** The names of the job's secrets and secret files; the values are in job_secrets. */
  secret_names: ColumnType<string[], string[] | undefined, string[]>;
  secret_file_names: ColumnType<string[], string[] | undefined, string[]>;
  /**
   * A queued job is claimable from then (forelead_claim): enqueue, runAt/delaySeconds, or a retry's
   * backoff.
   */
  claimable_at: ColumnType<Date, Date | string | undefined, Date | string>;
  /**
   * Its concurrency group: at most concurrency_limit jobs of the key run at once in the workspace.
   */
  concurrency_key: ColumnType<string | null, string | null | undefined, string | null>;
  concurrency_limit: ColumnType<number | null, number | null | undefined, number | null>;
  /** What people see the job called (checkDisplayName); null: none given. */
  display_name: ColumnType<string | null, string | null | undefined, string | null>;
  /** Its retry backoff (all null: requeued at once). */
  backoff_initial_seconds: ColumnType<number | null, number | null | undefined, number | null>;
  backoff_multiplier: ColumnType<number | null, number | null | undefined, number | null>;
  backoff_max_seconds: ColumnType<number | null, number | null | undefined, number | null>;
  /** What a runner must have (null / empty: anything). */
  req_architecture: ColumnType<string | null, string | null | undefined, string | null>;
  req_os: ColumnType<string | null, string | null | undefined, string | null>;
  req_execution_kind: ColumnType<string | null, string | null | undefined, string | null>;
  req_features: ColumnType<string[], string[] | undefined, string[]>;
  /** The job's result object and its last progress (docs/job-contract.md). */
  result: ColumnType<JsonObject | null, string | null | undefined, string | null>;
  progress: ColumnType<JsonObject | null, string | null | undefined, string | null>;
  /** The lease whose input request (job_inputs) is the job's latest. */
  input_lease_id: ColumnType<number | null, number | null | undefined, number | null>;
  /** The job this one retries, and the job that retried this one. */
  retry_of: ColumnType<string | null, string | null | undefined, string | null>;
  retried_by: ColumnType<string | null, string | null | undefined, string | null>;
  /** Who asked for the job's cancel (cancelJob), for the attempt the cancel ended. */
  cancelled_by: ColumnType<string | null, string | null | undefined, string | null>;
  /** The audiences the job may be given ID tokens for (null: none; docs/workload-identity.md). */
  id_token_audiences: ColumnType<string[] | null, string[] | null | undefined, string[] | null>;
  /** Its fairness key (fair shares within the workspace) and share tag (trigger jobs_fair_tag). */
  fairness_key: ColumnType<string | null, string | null | undefined, string | null>;
  fair_tag: ColumnType<number | null, number | null | undefined, number | null>;
  /** The rate limit it names (rate_limits.name): it starts only while the limit has room. */
  rate_limit: ColumnType<string | null, string | null | undefined, string | null>;
}

/** A named rate limit: at most max_starts job starts per window_seconds, and its recent starts. */
export interface RateLimitsTable {
  name: string;
  max_starts: number;
  window_seconds: number;
  starts: Generated<Date[]>;
  created_at: Generated<Date>;
  updated_at: Generated<Date>;
}

/** A fairness key's weight and last share tag (forelead_fair_tag); weight 1 unless set. */
export interface FairnessKeysTable {
  workspace_id: string;
  fairness_key: string;
  weight: Generated<number>;
  last_tag: Generated<number>;
  updated_at: Generated<Date>;
}

/** A job secret, sealed (src/secrets), until its job settles (trigger jobs_erase_secrets). */

export interface JobSecretsTable {
  job_id: string;
  kind: "env" | "file";
  name: string;
  sealed: Buffer;
}

/** A known value sealed by each secrets key in use: a start with another key is refused. */
export interface SecretsKeysTable {
  key_id: number;
  sealed: Buffer;
  created_at: Generated<Date>;
}

/** Every lease ever issued; the token itself is never stored, only its SHA-256. */
export interface LeasesTable {
  id: Generated<number>;
  token_sha256: Buffer;
  job_id: string;
  workspace_id: string;
  runner_id: string;
  attempt: number;
  issued_at: Generated<Date>;
  expires_at: Date;
  ended_at: Date | null;
  /** timed_out: the expiry sweep failed the job past its timeout plus grace. */
  end_reason: "released" | "expired" | "settled" | "requeued" | "timed_out" | "suspended" | null;
  completion_id: string | null;
  completion_sha256: string | null;
  /**
   * The jobs row as the completion settled it (to_jsonb), the reply a repeated completion gets
   * (src/broker/leases/complete.ts).
   */
  completion_reply: ColumnType<JsonObject | null, string | null, string | null>;
}

/** A repository the code routes may fetch from and push to. */
export interface RepositoriesTable {
  name: string;
  url: string;
  /** Never returned, logged or put in argv: handed to git through a private askpass file. */
  credential: string | null;
  /** The credential sealed (src/secrets); `credential` is emptied once it is. */
  credential_sealed: ColumnType<Buffer | null, Buffer | null | undefined, Buffer | null>;
  registered_by: string;
  created_at: Generated<Date>;
  updated_at: ColumnType<Date, Date | string | undefined, Date | string>;
}

/** A resumable artifact upload, bound to the lease that opened it. */
export interface UploadsTable {
  id: string;
  job_id: string;
  lease_id: number;
  workspace_id: string;
  runner_id: string;
  name: string;
  size: number;
  digest: string;
  media_type: string;
  /** Bytes held durably in staging (fsynced in the file, or committed in upload_chunks). */
  durable_size: Generated<number>;
  state: "open" | "finalized" | "discarded";
  discard_reason: string | null;
  created_at: Generated<Date>;
  updated_at: Generated<Date>;
  finalized_at: Date | null;
}

/** A blob of the Postgres artifact store; its bytes are rows of artifact_blob_chunks. */
export interface ArtifactBlobsTable {
  digest: string;
  size: number;
  created_at: Generated<Date>;
}

/** One piece of a blob or a staged upload: `data` is the bytes from `byte_offset` on. */
export interface ByteChunksTable {
  byte_offset: number;
  /** pg returns a Buffer, PGlite a Uint8Array. */
  data: Uint8Array;
}

/** A JSON object as stored in a jsonb column. */
export type JsonObject = { [key: string]: unknown };

/** A one-time enrollment grant; the secret itself is never stored, only its SHA-256. */
export interface EnrollmentGrantsTable {
  id: string;
  token_sha256: Buffer;
  workspace_id: string;
  runner_id: string | null;
  created_by: string;
  created_at: Generated<Date>;
  expires_at: Date;
  used_at: Date | null;
  used_by_runner: string | null;
  /** The grant may enroll an identity still in use (live, or with an unexpired certificate). */
  replace: ColumnType<boolean, boolean | undefined, boolean>;
}

/** A certificate the control plane's issuer signed. */
export interface IssuedCertificatesTable {
  serial: string;
  spiffe_id: string;
  workspace_id: string;
  runner_id: string;
  not_before: Date;
  not_after: Date;
  issued_at: Generated<Date>;
  issued_via: "enroll" | "renew";
  sha256: string;
  grant_id: string | null;
}

/** A retired runner identity: refused on every request from then on. */
export interface RunnerRetirementsTable {
  workspace_id: string;
  runner_id: string;
  retired_at: Generated<Date>;
  retired_by: string;
  reason: string;
}

/** A runner's latest inventory report: one row per runner, replaced by each report. */
export interface InventoryReportsTable {
  workspace_id: string;
  runner_id: string;
  reported_at: Timestamp;
  item_count: number;
}

/** One container or network of a runner's latest inventory report. */
export interface InventoryItemsTable {
  workspace_id: string;
  runner_id: string;
  kind: "container" | "network";
  name: string;
  job_id: string;
  state: string;
  image: string;
  created_at: Date | null;
  cpu: number;
  memory: number;
  orphan: boolean;
}

/** What an operator should look at in a runner's latest report. */
export type InventoryProblem =
  "job_not_leased_here" | "orphan_of_live_lease" | "lease_without_container";

/** A flag the control plane raised when it checked a runner's latest report. */
export interface InventoryFlagsTable {
  id: Generated<number>;
  workspace_id: string;
  runner_id: string;
  problem: InventoryProblem;
  job_id: string;
  kind: string | null;
  name: string | null;
  message: string;
}

/** Reap order states: pending until a later report settles it. */
export type ReapOrderState = "pending" | "done" | "expired";

/** An administrator's order to remove one orphan of one runner. */
export interface ReapOrdersTable {
  id: Generated<number>;
  workspace_id: string;
  runner_id: string;
  kind: string;
  name: string;
  job_id: string;
  ordered_by: string;
  ordered_at: Generated<Date>;
  state: Generated<ReapOrderState>;
  settled_at: Date | null;
}

/** The two streams a runner sends per lease. */
export type StreamName = "events" | "logs";

/** The last accepted sequence of one lease on one stream. */
export interface StreamCursorsTable {
  lease_id: number;
  stream: StreamName;
  last_sequence: number;
}

/** One accepted event or log message. */
export interface StreamMessagesTable {
  job_id: string;
  stream: StreamName;
  lease_id: number;
  attempt: number;
  sequence: number;
  data: ColumnType<unknown, string, string>;
  received_at: Generated<Date>;
}

/** The highest resource sample of a job, raised as samples are stored. */
export interface JobPeaksTable {
  job_id: string;
  peak_cpu_cores: number;
  peak_memory_bytes: number;
  samples: number;
}

/** A running `forelead serve` and its heartbeat. */
export interface ReplicasTable {
  id: string;
  host: string;
  pid: number;
  version: string;
  started_at: Generated<Date>;
  last_seen_at: ColumnType<Date, Date | string | undefined, Date | string>;
}

/** One event of the global stream (src/events/). */
export interface EventsTable {
  /**
   * The writing transaction's id (xid8, as text): how a follower tells an open gap from a final
   * one.
   */
  tx: ColumnType<string, never, never>;
  id: ColumnType<number, never, never>;
  at: ColumnType<Date, Date | string | undefined, never>;
  type: string;
  workspace_id: string | null;
  runner_id: string | null;
  job_id: string | null;
  data: ColumnType<unknown, string, never>;
}

/** An input request of a suspended job, keyed by the lease that suspended it (docs/suspend.md). */
export interface JobInputsTable {
  lease_id: number;
  job_id: string;
  request_id: string;
  prompt: string;
  schema: ColumnType<JsonObject, string, string>;
  expires_at: Date;
  /** The checkpoint manifest: [{name, digest, size, mediaType}]. */
  checkpoint: ColumnType<JsonObject[], string, string>;
  /** SHA-256 of the suspend request as checked: a repeat must match it. */
  suspend_sha256: string;
  created_at: Generated<Date>;
  answer: ColumnType<unknown, string | null | undefined, string | null>;
  answered_at: Date | null;
  answered_by: string | null;
}

/** A pipeline: a step graph sequenced by the control plane (src/broker/pipelines/). */
export interface PipelinesTable {
  id: string;
  workspace_id: string;
  name: string;
  idempotency_key: string | null;
  request_sha256: string;
  state: JobState;
  cancel_requested: Generated<boolean>;
  enqueued_by: string | null;
  created_at: Generated<Date>;
  updated_at: Generated<Date>;
  settled_at: Date | null;
}

/** A step's state; "running" is read from its job (the claim does not touch steps). */
export type StepState =
  "pending" | "queued" | "running" | "succeeded" | "failed" | "skipped" | "cancelled";

/** One step of a pipeline. */
export interface PipelineStepsTable {
  pipeline_id: string;
  name: string;
  ord: number;
  needs: string[];
  allow_failure: boolean;
  inputs: ColumnType<JsonObject[], string, string>;
  request: ColumnType<JsonObject, string, string>;
  state: StepState;
  job_id: string | null;
  attempts: Generated<number>;
  updated_at: Generated<Date>;
}

/**
 * A step's secret, sealed bound to the step (src/secrets/bindings.ts), copied into each job of the
 * step.
 */
export interface PipelineStepSecretsTable {
  pipeline_id: string;
  step: string;
  kind: "env" | "file";
  name: string;
  sealed: Buffer;
}

/** A template's missed-runs policy: what a tick does with due times passed while none ran. */
export type MissedRunsPolicy = "skip" | "runOnce" | "all";

/** A template's overlap policy: what a fire does while the previous run has not settled. */
export type OverlapPolicy = "allow" | "skip" | "cancelPrevious";

/** A cron schedule and the job or pipeline template each due time starts (secrets apart). */
export interface SchedulesTable {
  id: string;
  workspace_id: string;
  name: string;
  cron: string;
  time_zone: string;
  template_kind: "job" | "pipeline";
  template: ColumnType<JsonObject, string, string>;
  missed_runs: MissedRunsPolicy;
  overlap: OverlapPolicy;
  next_run_at: Timestamp;
  paused_at: Date | null;
  paused_by: string | null;
  created_by: string | null;
  created_at: Generated<Date>;
  updated_at: Generated<Date>;
}

/** One due time of a schedule and what came of it; the key makes each due time fire once. */
export interface ScheduleFiresTable {
  schedule_id: string;
  due_at: Timestamp;
  fired_at: Generated<Date>;
  cause: "due" | "missed" | "manual";
  outcome: "enqueued" | "skipped_missed" | "skipped_overlap" | "failed";
  job_id: string | null;
  pipeline_id: string | null;
  cancelled_id: string | null;
  idempotency_key: string | null;
  error: string | null;
}

/** A schedule template's secret, sealed bound to the schedule and step ("" for a job template). */
export interface ScheduleSecretsTable {
  schedule_id: string;
  step: string;
  kind: "env" | "file";
  name: string;
  sealed: Buffer;
}

/**
 * A person signed in by single sign-on, for whom one delegate may act (src/identity/sessions.ts);
 * only the credential's SHA-256 is kept.
 */
export interface PersonSessionsTable {
  id: string;
  credential_sha256: Buffer;
  /** The person's SPIFFE ID. */
  person: string;
  /** The identity claim the ID token carried, shown beside the ID. */
  person_claim: string;
  person_groups: ColumnType<string[], string[] | undefined, string[]>;
  /** The delegate's SPIFFE ID: the only identity that may present the credential. */
  delegate: string;
  created_at: Generated<Date>;
  expires_at: Date;
  ended_at: Date | null;
}

/** A webhook subscription (src/webhooks); its secret only sealed. */
export interface WebhookSubscriptionsTable {
  id: string;
  workspace_id: string | null;
  url: string;
  events: string[];
  secret_sealed: Buffer;
  enabled: Generated<boolean>;
  disabled_reason: string | null;
  /** Deliveries failed since the last one delivered; at the bound the subscription is disabled. */
  failed_in_a_row: Generated<number>;
  created_at: Generated<Date>;
  created_by: string;
}

/** One attempt of a delivery, as its log shows it. */
export interface WebhookTry {
  at: string;
  responseCode?: number;
  error?: string;
}

/** One event for one subscription, with its own copy of the event (written by webhook_fanout). */
export interface WebhookDeliveriesTable {
  id: Generated<string>;
  subscription_id: string;
  event_id: number;
  event_type: string;
  event_at: Date;
  workspace_id: string | null;
  runner_id: string | null;
  job_id: string | null;
  data: ColumnType<Record<string, unknown>, string, string>;
  status: Generated<"pending" | "delivered" | "failed">;
  attempts: Generated<number>;
  created_at: Generated<Date>;
  first_attempt_at: Date | null;
  next_attempt_at: Generated<Date>;
  locked_until: Date | null;
  response_code: number | null;
  last_error: string | null;
  finished_at: Date | null;
  tries: ColumnType<WebhookTry[], string, string>;
  /**
   * The transactions in flight when the event was written (pg_snapshot as text): the delivery
   * waits until they have ended, so one that holds a lower event id is delivered first.
   */
  event_snapshot: ColumnType<string, string, never>;
}

/** A scaling group an autoscale controller registered, held by that controller under a lease. */
export interface ScalingGroupsTable {
  name: string;
  workspace_id: string;
  labels: string[];
  /** Null: unknown, so a job that requires one is not the group's. */
  architecture: string | null;
  os: string | null;
  execution_kinds: string[];
  features: string[];
  min_runners: number;
  max_runners: number;
  slots_per_runner: number;
  idle_seconds: number;
  cooldown_seconds: number;
  provider: string;
  /** The controller instance holding the group. */
  controller: string;
  lease_expires_at: Date;
  registered_at: Generated<Date>;
  updated_at: Generated<Date>;
}
