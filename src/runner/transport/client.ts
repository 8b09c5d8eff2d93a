import type { JsonValue } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import {
  JobSchema,
  LeaseSchema,
  type Job,
  type Lease,
} from "../../../gen/forelead/runner/v1/job_pb.js";
import {
  ClaimResponseSchema,
  ClockResponseSchema,
  IdTokenResponseSchema,
  InventoryResponseSchema,
  WatchResponseSchema,
  type ReapOrder,
  type RunnerNotice,
} from "../../../gen/forelead/runner/v1/runner_pb.js";
import { decodeJson } from "../../protocol/json/codec.js";
import { refusalFix, type TlsSources } from "./failures.js";
import type { NdjsonPost } from "./ndjson-post.js";
import type { RestReply, RestTransport } from "./rest-transport.js";

/** The control plane answered with an error (the Connect error shape on REST). */
export class RunnerApiError extends Error {
  /** What the operator must change first, when no retry can succeed (failures.ts decides). */
  readonly fix: string | undefined;
  constructor(
    readonly route: string,
    readonly status: number,
    readonly code: string,
    message: string,
    sources?: TlsSources,
  ) {
    super(`${route}: ${status} ${code}: ${message}`);
    this.name = "RunnerApiError";
    this.fix = refusalFix(route, status, code, message, sources);
  }

  /** Register refused: another live process holds this runner identity (409 already_exists). */
  get secondInstance(): boolean {
    return this.status === 409 && this.code === "already_exists";
  }

  /**
   * 404 or 409 on a lease-scoped route: the lease is gone (expired, released, settled) and will not
   * come back.
   */
  get leaseGone(): boolean {
    return this.status === 404 || this.status === 409;
  }

  /** 404 "no route": a control plane older than the route (an additive one) does not serve it. */
  get noRoute(): boolean {
    return this.status === 404 && this.code === "not_found" && this.message.includes(": no route ");
  }

  /** A 5xx (other than 501) or 429: the same request may succeed later. */
  get transient(): boolean {
    return (this.status >= 500 && this.status !== 501) || this.status === 429;
  }
}

/** What the runner tells the control plane about itself. */
interface Registration {
  readonly slots: number;
  readonly cpu: number;
  readonly memoryBytes: number;
  readonly architecture: string;
  readonly labels: readonly string[];
  readonly clockOffsetNs: bigint;
  /**
   * This process (random per process start) and its start: the control plane refuses a second live
   * process of one runner.
   */
  readonly instance?: RunnerInstance;
  /**
   * Capabilities a job's requirements are matched against: "linux", ...; "docker"/"process";
   * protocol features.
   */
  readonly os?: string;
  readonly executionKinds?: readonly string[];
  readonly features?: readonly string[];
  readonly maxConcurrency?: number;
  /** The runner's version, shown to operators. */
  readonly version?: string;
  /** True when it registers again to say it drains (its state is "draining" then). */
  readonly draining?: boolean;
}

/** One process of a runner. */
export interface RunnerInstance {
  readonly id: string;
  readonly startedAt: Date;
}

/** A completion as the runner sends it (`POST /v1/runner/complete` in docs/routes.md). */
export interface Completion {
  readonly completionId: string;
  readonly outcome: "succeeded" | "failed" | "cancelled";
  readonly exitCode?: number;
  readonly error?: { readonly code: string; readonly message: string; readonly retryable: boolean };
  /** The result manifest: files uploaded and finalized under this lease. */
  readonly artifacts?: readonly {
    readonly name: string;
    readonly digest: string;
    readonly size: bigint;
    readonly mediaType: string;
  }[];
  /** The job's result object (docs/job-contract.md). */
  readonly result?: { readonly [key: string]: unknown };
}

/** An inventory item as `POST /v1/runner/inventory` carries it (docs/inventory.md). */
export interface InventoryItemJson {
  readonly kind: "container" | "network";
  readonly name: string;
  readonly jobId: string;
  readonly state: string;
  readonly image?: string;
  readonly createdAt?: string;
  readonly cpu?: number;
  readonly memory?: string;
  readonly orphan: boolean;
}

/** Runner protocol v1 as a runner calls it, over the REST surface. */
export interface RunnerClient {
  readonly runnerId: string;
  readonly workspaceId: string;
  /** The control plane's time in nanoseconds since the epoch. */
  clock(): Promise<bigint>;
  register(registration: Registration): Promise<void>;
  /**
   * Up to `maxLeases` leases (1 by default: `POST /v1/runner/claim`; more: `POST
   * /v1/runner/claims`), none when no job arrived within `waitSeconds`.
   */
  claim(waitSeconds: number, signal?: AbortSignal, maxLeases?: number): Promise<Lease[]>;
  /**
   * Renews a lease; `timeoutMs` bounds the wait (a renewal answered after the lease ran out is no
   * use).
   */
  renew(jobId: string, leaseToken: string, timeoutMs?: number): Promise<Lease>;
  /**
   * Calls `listener` once when a claim or renew reply says the runner was ordered to drain
   * (POST /v1/admin/runners/{runnerId}/drain).
   */
  onDrainOrdered(listener: () => void): void;
  release(jobId: string, leaseToken: string): Promise<void>;
  /** A signed ID token naming the job, for one of its idTokenAudiences (POST /v1/runner/id-token). */
  idToken(
    jobId: string,
    leaseToken: string,
    audience: string,
  ): Promise<{ readonly token: string; readonly expiresAtMs: number }>;
  /**
   * The runner's notices (`POST /v1/runner/watch`): at once when there are some, else the first
   * within `waitSeconds`, or none. `knownJobIds`: cancels the runner already has.
   */
  watch(
    waitSeconds: number,
    knownJobIds: readonly string[],
    signal?: AbortSignal,
  ): Promise<RunnerNotice[]>;
  /**
   * Settles the job; with `next`, the reply may carry the runner's next lease
   * (CompleteRequest.next).
   */
  complete(
    jobId: string,
    leaseToken: string,
    completion: Completion,
    next?: { readonly waitSeconds: number },
  ): Promise<{ job: Job; lease?: Lease }>;
  inventory(items: readonly InventoryItemJson[]): Promise<ReapOrder[]>;
  /**
   * POSTs an NDJSON body to a stream route on the runner's connection; resolves with the reply
   * whatever its status.
   */
  readonly postNdjson: NdjsonPost;
  close(): Promise<void>;
}

const apiVersion = "v1";

/** A client for the runner whose certificate names `runnerId` in `workspaceId`. */
export function createRunnerClient(
  transport: RestTransport,
  runnerId: string,
  workspaceId: string,
): RunnerClient {
  const call = async (
    method: string,
    path: string,
    body?: unknown,
    timeoutMs?: number,
    signal?: AbortSignal,
  ): Promise<RestReply> => {
    const reply = await transport.request(method, path, body, {
      timeoutMs: timeoutMs || undefined,
      signal,
    });
    if (reply.status >= 200 && reply.status < 300) return reply;
    const err = (reply.json ?? {}) as { code?: string; message?: string };
    throw new RunnerApiError(
      `${method} ${path}`,
      reply.status,
      err.code ?? "unknown",
      err.message ?? (reply.text.slice(0, 200) || "no error body"),
      transport.sources,
    );
  };
  const leaseBody = (jobId: string, leaseToken: string) => ({ apiVersion, jobId, leaseToken });
  /** Whether the control plane serves POST /v1/runner/claims (until a 404 says it does not). */
  let claimsServed = true;
  const drainListeners: Array<() => void> = [];
  let drainHeard = false;
  const heardDrain = (drain: boolean) => {
    if (!drain || drainHeard) return;
    drainHeard = true;
    for (const listener of drainListeners) listener();
  };
  return {
    runnerId,
    workspaceId,
    async clock() {
      const reply = await call("GET", "/v1/runner/clock");
      const clock = decodeJson(ClockResponseSchema, reply.json as JsonValue);
      if (!clock.serverTime)
        throw new RunnerApiError(
          "GET /v1/runner/clock",
          reply.status,
          "invalid",
          "the reply has no serverTime",
        );
      return clock.serverTime.seconds * 1_000_000_000n + BigInt(clock.serverTime.nanos);
    },
    async register(r) {
      await call("POST", "/v1/runner/register", {
        apiVersion,
        runnerId,
        workspaceId,
        slots: r.slots,
        cpu: r.cpu,
        memoryBytes: String(r.memoryBytes),
        architecture: r.architecture,
        labels: r.labels,
        clockOffsetNs: String(r.clockOffsetNs),
        instanceId: r.instance?.id,
        instanceStartedAt: r.instance?.startedAt.toISOString(),
        os: r.os || undefined,
        executionKinds: r.executionKinds?.length ? r.executionKinds : undefined,
        features: r.features?.length ? r.features : undefined,
        maxConcurrency: r.maxConcurrency || undefined,
        version: r.version || undefined,
        draining: r.draining || undefined,
      });
    },
    async claim(waitSeconds, signal, maxLeases = 1) {
      // The server holds a long poll up to waitSeconds; allow it that long plus room for the
      // database.
      const timeoutMs = waitSeconds * 1000 + 15_000;
      const claimOne = async () => {
        const reply = await call(
          "POST",
          "/v1/runner/claim",
          { apiVersion, runnerId, waitSeconds },
          timeoutMs,
          signal,
        );
        return reply.status === 204 || reply.json === undefined
          ? []
          : [decodeJson(LeaseSchema, reply.json as JsonValue)];
      };
      // ClaimLeases even for one lease: only its reply can say "drain" when it leases nothing.
      if (!claimsServed) return claimOne();
      try {
        const reply = await call(
          "POST",
          "/v1/runner/claims",
          { apiVersion, runnerId, waitSeconds, maxLeases },
          timeoutMs,
          signal,
        );
        if (reply.status === 204 || reply.json === undefined) return [];
        const claimed = decodeJson(ClaimResponseSchema, reply.json as JsonValue);
        heardDrain(claimed.drain);
        return claimed.leases;
      } catch (err) {
        // A control plane older than multi-lease claims has no such route (404 "no route ..."):
        // claim one at a time from then on. (Its completions ignore `next`, an unknown field.)
        if (!(err instanceof RunnerApiError && err.noRoute)) throw err;
        claimsServed = false;
        return claimOne();
      }
    },
    async renew(jobId, leaseToken, timeoutMs) {
      const reply = await call("POST", "/v1/runner/renew", leaseBody(jobId, leaseToken), timeoutMs);
      const lease = decodeJson(LeaseSchema, reply.json as JsonValue);
      heardDrain(lease.drain);
      return lease;
    },
    onDrainOrdered(listener) {
      drainListeners.push(listener);
    },
    async watch(waitSeconds, knownJobIds, signal) {
      const reply = await call(
        "POST",
        "/v1/runner/watch",
        { apiVersion, runnerId, waitSeconds, knownJobIds },
        waitSeconds * 1000 + 15_000,
        signal,
      );
      return decodeJson(WatchResponseSchema, (reply.json ?? {}) as JsonValue).notices;
    },
    async release(jobId, leaseToken) {
      await call("POST", "/v1/runner/release", leaseBody(jobId, leaseToken));
    },
    async idToken(jobId, leaseToken, audience) {
      const reply = await call("POST", "/v1/runner/id-token", {
        ...leaseBody(jobId, leaseToken),
        audience,
      });
      const { token, expiresAt } = decodeJson(IdTokenResponseSchema, reply.json as JsonValue);
      return { token, expiresAtMs: expiresAt ? timestampDate(expiresAt).getTime() : 0 };
    },
    async complete(jobId, leaseToken, c, next) {
      const body = {
        ...leaseBody(jobId, leaseToken),
        completionId: c.completionId,
        outcome: c.outcome,
        exitCode: c.exitCode,
        error: c.error,
        // int64 is a string in proto JSON.
        artifacts: c.artifacts?.length
          ? c.artifacts.map((a) => ({
              name: a.name,
              digest: a.digest,
              size: String(a.size),
              mediaType: a.mediaType,
            }))
          : undefined,
        result: c.result as JsonValue | undefined,
        next,
      };
      // A completion that waits for its next lease is held up to next.waitSeconds longer.
      const reply = await call(
        "POST",
        "/v1/runner/complete",
        body,
        next ? next.waitSeconds * 1000 + 15_000 : undefined,
      );
      const { job, lease } = (reply.json ?? {}) as { job?: JsonValue; lease?: JsonValue };
      return {
        job: decodeJson(JobSchema, job ?? {}),
        lease: lease ? decodeJson(LeaseSchema, lease) : undefined,
      };
    },
    async inventory(items) {
      const reply = await call("POST", "/v1/runner/inventory", { apiVersion, runnerId, items });
      return decodeJson(InventoryResponseSchema, (reply.json ?? {}) as JsonValue).reap;
    },
    postNdjson: (path, body, timeoutMs) =>
      transport.request("POST", path, body, { contentType: "application/x-ndjson", timeoutMs }),
    close: () => transport.close(),
  };
}

/** A lease's expiry in control-plane milliseconds since the epoch. */
export function leaseExpiryMs(lease: Lease): number {
  if (!lease.expiresAt)
    throw new Error(`the lease on job ${lease.job?.id ?? "?"} has no expiresAt`);
  return timestampDate(lease.expiresAt).getTime();
}
