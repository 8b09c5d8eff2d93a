// The rules an enqueue must pass: its fields, limits and scheduling.
import { Code, ConnectError } from "@connectrpc/connect";
import type { JobState } from "../../store/schema.js";
import { checkSegmentId } from "../../identity/segment-id.js";
import { validateSecrets, type JobSecretsInput } from "./secrets.js";

/** What to run. argv is an array, never a shell string. */
export interface JobSpecInput {
  readonly image: string;
  readonly argv: readonly string[];
  readonly env: Readonly<Record<string, string>>;
  readonly timeoutSeconds: number;
  readonly cpu: number;
  readonly memoryBytes: number;
}

/** An enqueue request, already decoded; its secrets (JobSecretsInput) are write-only. */
export interface EnqueueInput extends JobSecretsInput {
  readonly workspaceId: string;
  readonly labels: readonly string[];
  readonly repository: string;
  readonly targetBranch: string;
  readonly spec: JobSpecInput | undefined;
  readonly maxAttempts: number;
  readonly priority: number;
  readonly idempotencyKey: string;
  /** "command", "checkout" or "agent"; empty: checkout with a repository, command without. */
  readonly kind: string;
  /** The SPIFFE ID enqueueing it, stored as the job's owner. */
  readonly enqueuedBy?: string;
  /** Not claimable before then; excludes delaySeconds. */
  readonly runAt?: Date;
  /** Not claimable for this many seconds after the enqueue; undefined when not given. */
  readonly delaySeconds?: number;
  /**
   * A concurrency group: at most concurrencyLimit jobs of the key run at once in the workspace.
   * Empty: none.
   */
  readonly concurrencyKey?: string;
  readonly concurrencyLimit?: number;
  /**
   * What this enqueue does to the jobs of its concurrency group already there (group-policy.ts):
   * "queue" (default), "cancel_in_progress" or "keep_newest"; with maxPending (0: no bound) and
   * onFull "reject" (default) or "replace_oldest". Only with a concurrencyKey.
   */
  readonly concurrencyPolicy?: string;
  readonly maxPending?: number;
  readonly onFull?: string;
  /**
   * Its fairness key within the workspace (a tenant, a user): at equal priority, keys are served in
   * proportion to their weights (forelead_fair_tag). Empty: none.
   */
  readonly fairnessKey?: string;
  /**
   * The rate limit it names (PUT /v1/admin/rate-limits/{name}): it starts only while the limit has
   * room (forelead_rate_limit_room). Empty: none.
   */
  readonly rateLimit?: string;
  /** How retries are spaced; undefined: requeued at once. */
  readonly backoff?: BackoffInput;
  /** What a runner must have to be leased the job. */
  readonly requirements?: RequirementsInput;
  /** The audiences the job may be given ID tokens for; undefined: none (docs/workload-identity.md). */
  readonly idToken?: IdTokenInput;
  /** What people see the job called (checkDisplayName); empty or undefined: none. */
  readonly displayName?: string;
}

/** The ID tokens a job may ask for under its lease. */
interface IdTokenInput {
  readonly allowedAudiences: readonly string[];
}

/**
 * A retry backoff as enqueued: multiplier 0 means 2, maxSeconds 0 means an hour (or initialSeconds
 * when larger).
 */
interface BackoffInput {
  readonly initialSeconds: number;
  readonly multiplier: number;
  readonly maxSeconds: number;
}

/** Runner capabilities a job requires; an empty field requires nothing. */
interface RequirementsInput {
  readonly architecture: string;
  readonly os: string;
  readonly executionKind: string;
  readonly features: readonly string[];
}

/** How runners run jobs (RegisterRequest.executionKinds, Requirements.executionKind). */
const executionKinds = ["docker", "process"] as const;

/** Bounds on scheduling fields; outside them an enqueue is refused by name. */
export const scheduleLimits = {
  maxDelaySeconds: 366 * 24 * 3600,
  maxBackoffSeconds: 7 * 24 * 3600,
  defaultBackoffMaxSeconds: 3600,
  maxMultiplier: 10,
  maxConcurrencyLimit: 10_000,
  maxFeatures: 32,
  maxAudiences: 8,
} as const;

/** A capability name: architecture, os or feature ("amd64", "linux", "cancel-v1"). */
const capabilityPattern = /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/;

/** Checks a capability name; throws invalid_argument naming `field`. */
export function checkCapability(field: string, value: string): void {
  if (!capabilityPattern.test(value))
    bad(
      `${field} ${JSON.stringify(value.slice(0, 70))} is not a capability ` +
        `name: 1 to 63 characters of A-Z a-z 0-9 . _ -, starting with a letter ` +
        `or digit`,
    );
}

/** Checks an execution kind; throws invalid_argument naming `field`. */
export function checkExecutionKind(field: string, value: string): void {
  if (!(executionKinds as readonly string[]).includes(value))
    bad(
      `${field} ${JSON.stringify(value.slice(0, 40))} is not an execution kind: one of ${executionKinds.join(", ")}`,
    );
}

/**
 * Job kinds: a command runs without code; checkout and agent jobs get a base commit pinned at
 * claim.
 */
const jobKinds = ["command", "checkout", "agent"] as const;

/** The kind an enqueue asks for, its default filled in. */
export function jobKindOf(input: Pick<EnqueueInput, "kind" | "repository">): string {
  return input.kind || (input.repository ? "checkout" : "command");
}

/** Limits on what a job may ask for; outside them the enqueue is refused by name. */
export const jobLimits = {
  maxAttempts: 100,
  defaultMaxAttempts: 3,
  maxPriority: 1_000_000,
  maxArgs: 4096,
  maxEnv: 1024,
} as const;

/**
 * The control plane's job deadlines (forelead serve --default-job-timeout,
 * --max-job-timeout, --job-timeout-grace). A job's timeoutSeconds (the
 * default when it gives none) is stored in its spec, so the runner enforces
 * the same limit; the expiry sweep fails a job still running `graceSeconds`
 * after it, when the runner did not stop it.
 */
export interface JobTimeouts {
  readonly defaultSeconds: number;
  readonly maxSeconds: number;
  readonly graceSeconds: number;
}

/** 6 h by default (GitHub Actions' job limit), at most 7 days, 30 s of grace. */
export const defaultJobTimeouts: JobTimeouts = {
  defaultSeconds: 6 * 3600,
  maxSeconds: 7 * 24 * 3600,
  graceSeconds: 30,
};

const labelPattern = /^[A-Za-z0-9][A-Za-z0-9._:/=-]{0,62}$/;
const envName = /^[A-Za-z_][A-Za-z0-9_]*$/;
/** Every job state. */
export const jobStates: readonly JobState[] = [
  "queued",
  "running",
  "waiting_input",
  "succeeded",
  "failed",
  "cancelled",
];

/** Throws invalid_argument with the message. */
export function bad(message: string): never {
  throw new ConnectError(message, Code.InvalidArgument);
}

/** Longest display name of a job or step, in characters. */
const maxDisplayNameChars = 200;

/**
 * Control characters (C0, DEL, C1) and the bidirectional controls, which would let a name shown in
 * a list or a terminal read as something else.
 */
const displayNameRefused = /[\p{Cc}\u061C\u200E\u200F\u202A-\u202E\u2066-\u2069\u2028\u2029]/u;

/**
 * Checks a display name (a job's or a step's): at most 200 characters, no control character;
 * throws invalid_argument naming `field` and never quoting the text.
 */
function checkDisplayName(field: string, value: string): void {
  const chars = [...value].length;
  if (chars > maxDisplayNameChars)
    bad(`${field} is ${chars} characters long; at most ${maxDisplayNameChars} are allowed`);
  const at = value.search(displayNameRefused);
  if (at !== -1)
    bad(
      `${field} holds a control character (U+${value.codePointAt(at)!.toString(16).toUpperCase().padStart(4, "0")}` +
        ` at index ${at}): a display name is one line of printable text`,
    );
}

/** Checks runner labels; throws invalid_argument naming the first bad one as `field[i]`. */
export function checkLabels(field: string, labels: readonly string[]): void {
  labels.forEach(
    (l, i) =>
      labelPattern.test(l) ||
      bad(
        `${field}[${i}] ${JSON.stringify(l)} is not a label: 1 to 63 characters ` +
          `of A-Z a-z 0-9 . _ : / = -, starting with a letter or digit`,
      ),
  );
}

/** Checks an enqueue request; throws invalid_argument naming the first bad field. */
export function validateEnqueue(
  input: EnqueueInput,
  timeouts: JobTimeouts = defaultJobTimeouts,
): void {
  checkSegmentId("workspaceId", input.workspaceId);
  checkLabels("labels", input.labels);
  if (input.displayName) checkDisplayName("displayName", input.displayName);
  if (input.maxAttempts < 0 || input.maxAttempts > jobLimits.maxAttempts)
    bad(
      `maxAttempts must be 1 to ${jobLimits.maxAttempts} (0 means ` +
        `${jobLimits.defaultMaxAttempts}); got ${input.maxAttempts}`,
    );
  if (Math.abs(input.priority) > jobLimits.maxPriority)
    bad(
      `priority must be between -${jobLimits.maxPriority} and ${jobLimits.maxPriority}; got ${input.priority}`,
    );
  if (input.idempotencyKey.length > 200) bad("idempotencyKey is longer than 200 characters");
  const kind = jobKindOf(input);
  if (!(jobKinds as readonly string[]).includes(kind))
    bad(`kind ${JSON.stringify(kind.slice(0, 40))} is not one of ${jobKinds.join(", ")}`);
  if (input.targetBranch && !input.repository) bad("targetBranch needs a repository");
  if (kind === "command" && input.repository)
    bad("a command job has no repository; use kind checkout or agent for a job with code");
  const aKind = kind === "agent" ? "an agent" : `a ${kind}`;
  if (kind !== "command" && !input.repository)
    bad(`${aKind} job needs a repository (a registered repository's name)`);
  if (kind !== "command" && !input.targetBranch)
    bad(`${aKind} job needs a targetBranch: the branch its base commit is pinned from at claim`);
  const spec = input.spec;
  if (!spec) bad("spec is required: {image, argv, env, timeoutSeconds, cpu, memoryBytes}");
  if (spec.argv.length === 0)
    bad('spec.argv is required: the command as an array, e.g. ["sh", "-c", "make test"]');
  if (spec.argv.length > jobLimits.maxArgs)
    bad(`spec.argv has ${spec.argv.length} entries; at most ${jobLimits.maxArgs} are allowed`);
  if (spec.image.length > 512) bad("spec.image is longer than 512 characters");
  if (!Number.isSafeInteger(spec.timeoutSeconds) || spec.timeoutSeconds < 0)
    bad(
      `spec.timeoutSeconds must be a whole number of seconds, 0 for this ` +
        `control plane's default of ${timeouts.defaultSeconds} s; got ` +
        `${spec.timeoutSeconds}`,
    );
  if (spec.timeoutSeconds > timeouts.maxSeconds)
    bad(
      `spec.timeoutSeconds ${spec.timeoutSeconds} is over this control plane's ` +
        `maximum job timeout of ${timeouts.maxSeconds} s (forelead serve ` +
        `--max-job-timeout)`,
    );
  if (!(spec.cpu >= 0) || !Number.isFinite(spec.cpu))
    bad(`spec.cpu must be a non-negative number of cores; got ${spec.cpu}`);
  if (!(spec.memoryBytes >= 0) || !Number.isSafeInteger(spec.memoryBytes))
    bad(`spec.memoryBytes must be a non-negative byte count; got ${spec.memoryBytes}`);
  const env = Object.keys(spec.env);
  if (env.length > jobLimits.maxEnv)
    bad(`spec.env has ${env.length} entries; at most ${jobLimits.maxEnv} are allowed`);
  env.forEach(
    (k) =>
      envName.test(k) ||
      bad(
        `spec.env key ${JSON.stringify(k)} is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)`,
      ),
  );
  validateSecrets(input);
  validateSchedule(input);
}

/** queue: today's (wait your turn); cancel_in_progress: cancel the running; keep_newest: the queued. */
const policies = ["queue", "cancel_in_progress", "keep_newest"];
/** Over maxPending: refuse the enqueue (429), or cancel the oldest queued job of the key. */
const onFull = ["reject", "replace_oldest"];

/** The concurrency-group policy fields (group-policy.ts): only with a group, each from its set. */
function validatePolicy(input: EnqueueInput, key: string): void {
  const policy = input.concurrencyPolicy ?? "";
  const max = input.maxPending ?? 0;
  const full = input.onFull ?? "";
  if (policy && !policies.includes(policy))
    bad(
      `concurrencyPolicy ${JSON.stringify(policy.slice(0, 40))} is not one of ${policies.join(", ")}`,
    );
  if (full && !onFull.includes(full))
    bad(`onFull ${JSON.stringify(full.slice(0, 40))} is not one of ${onFull.join(", ")}`);
  if (!(Number.isInteger(max) && max >= 0 && max <= scheduleLimits.maxConcurrencyLimit))
    bad(`maxPending must be 0 (no bound) to ${scheduleLimits.maxConcurrencyLimit}; got ${max}`);
  if (full && max === 0) bad("onFull needs a maxPending: the bound it acts on");
  if (!key && (policy || max || full))
    bad("concurrencyPolicy, maxPending and onFull need a concurrencyKey: the group they act on");
}

/**
 * The scheduling fields of an enqueue: when, how retries are spaced, its group, its requirements.
 */
function validateSchedule(input: EnqueueInput): void {
  if (input.runAt && input.delaySeconds !== undefined)
    bad(
      "runAt and delaySeconds exclude each other: give runAt (a time) or delaySeconds (from now), not both",
    );
  if (input.runAt && !(input.runAt.getTime() <= Date.now() + scheduleLimits.maxDelaySeconds * 1000))
    bad(
      `runAt ${input.runAt.toISOString()} is more than ${scheduleLimits.maxDelaySeconds} s (366 days) ahead`,
    );
  const delay = input.delaySeconds;
  if (
    delay !== undefined &&
    !(Number.isSafeInteger(delay) && delay >= 0 && delay <= scheduleLimits.maxDelaySeconds)
  )
    bad(
      `delaySeconds must be a whole number of seconds from 0 to ${scheduleLimits.maxDelaySeconds}; got ${delay}`,
    );
  const key = input.concurrencyKey ?? "";
  const limit = input.concurrencyLimit ?? 0;
  if (key && !labelPattern.test(key))
    bad(
      `concurrencyKey ${JSON.stringify(key.slice(0, 70))} is not a group name: ` +
        `1 to 63 characters of A-Z a-z 0-9 . _ : / = -, starting with a letter ` +
        `or digit`,
    );
  if (!key && limit !== 0)
    bad("concurrencyLimit needs a concurrencyKey: the group whose running jobs it bounds");
  if (
    key &&
    !(Number.isInteger(limit) && limit >= 1 && limit <= scheduleLimits.maxConcurrencyLimit)
  )
    bad(
      `concurrencyLimit must be 1 to ${scheduleLimits.maxConcurrencyLimit} ` +
        `with a concurrencyKey (how many jobs of the group may run at once); got ` +
        `${limit}`,
    );
  if (input.fairnessKey) checkSegmentId("fairnessKey", input.fairnessKey);
  if (input.rateLimit) checkSegmentId("rateLimit", input.rateLimit);
  validatePolicy(input, key);
  const b = input.backoff;
  if (b) {
    if (!(b.initialSeconds > 0 && b.initialSeconds <= scheduleLimits.maxBackoffSeconds))
      bad(
        `backoff.initialSeconds must be more than 0 and at most ` +
          `${scheduleLimits.maxBackoffSeconds}; got ${b.initialSeconds}`,
      );
    if (!(
      b.multiplier === 0 ||
      (b.multiplier >= 1 && b.multiplier <= scheduleLimits.maxMultiplier)
    ))
      bad(
        `backoff.multiplier must be 1 to ${scheduleLimits.maxMultiplier} (0 means 2); got ${b.multiplier}`,
      );
    if (!(
      b.maxSeconds === 0 ||
      (b.maxSeconds >= b.initialSeconds && b.maxSeconds <= scheduleLimits.maxBackoffSeconds)
    ))
      bad(
        `backoff.maxSeconds must be 0 (an hour) or from backoff.initialSeconds ` +
          `(${b.initialSeconds}) to ${scheduleLimits.maxBackoffSeconds}; got ` +
          `${b.maxSeconds}`,
      );
  }
  const r = input.requirements;
  if (r) {
    if (r.architecture) checkCapability("requirements.architecture", r.architecture);
    if (r.os) checkCapability("requirements.os", r.os);
    if (r.executionKind) checkExecutionKind("requirements.executionKind", r.executionKind);
    if (r.features.length > scheduleLimits.maxFeatures)
      bad(
        `requirements.features has ${r.features.length} entries; at most ${scheduleLimits.maxFeatures} are allowed`,
      );
    r.features.forEach((f, i) => checkCapability(`requirements.features[${i}]`, f));
  }
  const t = input.idToken;
  if (t) {
    const n = t.allowedAudiences.length;
    if (n < 1 || n > scheduleLimits.maxAudiences)
      bad(
        `idToken.allowedAudiences has ${n} entries; give 1 to ${scheduleLimits.maxAudiences} ` +
          `audiences the job may be given ID tokens for, or leave idToken out`,
      );
    t.allowedAudiences.forEach((a, i) => checkAudience(`idToken.allowedAudiences[${i}]`, a));
  }
}

/** An ID token's audience: 1 to 256 printable ASCII characters, no space. */
const audiencePattern = /^[\x21-\x7e]{1,256}$/;

/**
 * Throws InvalidArgument unless `audience` is an audience an ID token may name (an enqueue's
 * idToken.allowedAudiences, an IdTokenRequest's audience).
 */
export function checkAudience(field: string, audience: string): void {
  if (!audiencePattern.test(audience))
    bad(
      `${field} ${JSON.stringify(audience.slice(0, 40))}${audience.length > 40 ? "…" : ""} ` +
        `(${audience.length} characters) is not an audience: 1 to 256 printable ASCII ` +
        `characters without spaces, e.g. sts.amazonaws.com or https://vault.example`,
    );
}
