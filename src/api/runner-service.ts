import { Code, ConnectError, type ServiceImpl } from "@connectrpc/connect";
import { timestampDate, timestampFromDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import {
  EventsRequestSchema,
  LogsRequestSchema,
  type RunnerService,
} from "../../gen/forelead/runner/v1/runner_pb.js";
import type { DbClock } from "../store/db-clock.js";
import type { Broker } from "../broker/broker.js";
import type { LeaseView } from "../broker/leases/views.js";
import { describeChange } from "../broker/fleet/registrations.js";
import type { Enrollments } from "../identity/enrollment.js";
import { audited, recordAction } from "./audit-actions.js";
import type { Inventory } from "../inventory/inventory.js";
import type { CodeHost } from "../code/code-host.js";
import type { Artifacts } from "../artifacts/artifacts.js";
import type { Streams } from "../streams/streams.js";
import type { IssuedJobToken, JobTokenRequest } from "../identity/job-tokens/issue.js";
import { runnerArtifactHandlers } from "./artifact-handlers.js";
import { runnerOf } from "./context.js";
import { jobMessage, leaseMessage } from "./job-view.js";
import { publishChunks } from "./publish-body.js";
import { apiVersion, checkApiVersion } from "./request-rules.js";
import { ingestRequests } from "./stream-handlers.js";

/** What the runner service binds to. */
export interface RunnerServiceDeps {
  readonly clock: DbClock;
  readonly broker: Broker;
  /** Certificate renewal. */
  readonly enrollment: Enrollments;
  readonly inventory: Inventory;
  readonly code: CodeHost;
  readonly artifacts: Artifacts;
  readonly streams: Streams;
  /** Jobs' ID tokens; undefined when the control plane issues none (no --job-token-key). */
  readonly jobTokens?: { issue(req: JobTokenRequest): Promise<IssuedJobToken> };
}

/** Runner protocol v1: each handler decodes nothing itself, calls the domain, shapes the reply. */
export function createRunnerService(deps: RunnerServiceDeps): ServiceImpl<typeof RunnerService> {
  return {
    clock: () => ({ apiVersion, serverTime: timestampFromNs(deps.clock.nowNs()) }),

    async register(req, ctx) {
      const runner = runnerOf(ctx);
      const target = `runner "${runner.runnerId}" in workspace "${runner.workspaceId}"`;
      const registered = await deps.broker
        .register({
          workspaceId: runner.workspaceId,
          runnerId: runner.runnerId,
          slots: req.slots,
          cpu: req.cpu,
          memoryBytes: Number(req.memoryBytes),
          architecture: req.architecture,
          labels: req.labels,
          clockOffsetNs: Number(req.clockOffsetNs),
          os: req.os,
          executionKinds: req.executionKinds,
          features: req.features,
          maxConcurrency: req.maxConcurrency,
          instanceId: req.instanceId,
          instanceStartedAt: req.instanceStartedAt
            ? timestampDate(req.instanceStartedAt)
            : undefined,
          version: req.version,
          draining: req.draining,
        })
        .catch((err: unknown) => {
          // A second process of one runner is an identity decision: keep it.
          if (err instanceof ConnectError && err.code === Code.AlreadyExists)
            recordAction(ctx, {
              action: "runner.register",
              target,
              decision: "deny",
              reason: err.rawMessage,
            });
          throw err;
        });
      if (registered.change) {
        const reason =
          `registration ` +
          `changed${registered.change.live ? " while the runner was live" : ""}: ` +
          `${describeChange(registered.change)}`;
        console.log(`forelead: ${target}: ${reason}`);
        recordAction(ctx, { action: "runner.register", target, decision: "allow", reason });
      }
      return { apiVersion };
    },

    async claim(req, ctx) {
      // Its REST body is one lease: a second would be leased and never delivered.
      if (req.maxLeases > 1)
        throw new ConnectError(
          `maxLeases ${req.maxLeases}: Claim (POST /v1/runner/claim) leases one ` +
            `job; ask ClaimLeases (POST /v1/runner/claims) for more`,
          Code.InvalidArgument,
        );
      return claimResponse(
        deps.broker,
        runnerOf(ctx),
        await deps.broker.claim(runnerOf(ctx), req.waitSeconds, ctx.signal),
      );
    },

    async claimLeases(req, ctx) {
      return claimResponse(
        deps.broker,
        runnerOf(ctx),
        await deps.broker.claim(runnerOf(ctx), req.waitSeconds, ctx.signal, req.maxLeases || 1),
      );
    },

    async renew(req, ctx) {
      return {
        lease: leaseMessage(
          await deps.broker.renew({
            ...runnerOf(ctx),
            jobId: req.jobId,
            leaseToken: req.leaseToken,
          }),
        ),
      };
    },

    async watch(req, ctx) {
      const notices = await deps.broker.watch(
        runnerOf(ctx),
        req.waitSeconds,
        req.knownJobIds,
        ctx.signal,
      );
      return { apiVersion, notices };
    },

    async release(req, ctx) {
      await deps.broker.release({ ...runnerOf(ctx), jobId: req.jobId, leaseToken: req.leaseToken });
      return {};
    },

    async complete(req, ctx) {
      const artifacts = await deps.artifacts.checkManifest(runnerOf(ctx), req.jobId, req.artifacts);
      const input = {
        ...runnerOf(ctx),
        jobId: req.jobId,
        leaseToken: req.leaseToken,
        completionId: req.completionId,
        outcome: req.outcome,
        exitCode: req.exitCode,
        error: req.error,
        artifacts,
        result: req.result,
      };
      if (!req.next) return { apiVersion, job: jobMessage(await deps.broker.complete(input)) };
      const { job, lease } = await deps.broker.completeAndClaim(
        input,
        req.next.waitSeconds,
        ctx.signal,
      );
      return { apiVersion, job: jobMessage(job), lease: lease ? leaseMessage(lease) : undefined };
    },

    async idToken(req, ctx) {
      const jobTokens = deps.jobTokens;
      if (!jobTokens)
        throw new ConnectError(
          "this control plane issues no job ID tokens; start it with --job-token-key " +
            "(docs/workload-identity.md)",
          Code.FailedPrecondition,
        );
      const audience = JSON.stringify(req.audience.slice(0, 80));
      const issued = await audited(
        ctx,
        "job.id_token",
        `job ${req.jobId.slice(0, 64)} audience ${audience}`,
        () => jobTokens.issue({ ...runnerOf(ctx), ...req }),
        (t) => ({
          reason: `issued ${t.subject} token jti ${t.jti}, expires ${t.expiresAt.toISOString()}`,
        }),
      );
      return { apiVersion, token: issued.token, expiresAt: timestampFromDate(issued.expiresAt) };
    },

    async codeHead(req, ctx) {
      return {
        apiVersion,
        commit: await deps.code.head({
          ...runnerOf(ctx),
          jobId: req.jobId,
          leaseToken: req.leaseToken,
        }),
      };
    },

    async *downloadInput(req, ctx) {
      const input = await deps.broker.input(
        runnerOf(ctx),
        req.jobId,
        req.leaseToken,
        req.fromJobId,
        req.name,
      );
      const artifact = await deps.artifacts.read(input.fromJobId, input.name);
      for await (const data of artifact.chunks) {
        if (ctx.signal.aborted) return;
        yield { data };
      }
    },

    async *codeBundle(req, ctx) {
      for await (const data of deps.code.bundle({
        ...runnerOf(ctx),
        jobId: req.jobId,
        leaseToken: req.leaseToken,
        kind: req.kind,
        commit: req.commit,
      }))
        yield { data };
    },

    async agentPublish(reqs, ctx) {
      const { first, chunks } = await publishChunks(reqs, deps.code.maxBundleBytes);
      checkApiVersion(first.apiVersion);
      const published = await deps.code.publish(
        { ...runnerOf(ctx), jobId: first.jobId, leaseToken: first.leaseToken },
        chunks,
      );
      return { apiVersion, commit: published.commit, branch: published.branch };
    },
    async renewCertificate(req, ctx) {
      const runner = runnerOf(ctx);
      const spiffeId = runner.spiffeId.text;
      const renew = () => deps.enrollment.renew({ ...runner, spiffeId }, req.csr);
      const cert = await audited(
        ctx,
        "certificate.issue",
        `certificate renewal for ${spiffeId}`,
        renew,
        (c) => ({
          target:
            `certificate ${c.serialHex} (sha256 ${c.sha256}) for ${spiffeId}, valid ` +
            `${c.notBefore.toISOString()} to ${c.notAfter.toISOString()}`,
          reason: "issued on renewal",
        }),
      );
      return {
        apiVersion,
        certificateChain: cert.chainPem,
        spiffeId,
        notAfter: timestampFromDate(cert.notAfter),
      };
    },

    async inventory(req, ctx) {
      const items = req.items.map((i) => ({
        ...i,
        createdAt: i.createdAt ? timestampDate(i.createdAt) : undefined,
      }));
      const outcome = await deps.inventory.report(runnerOf(ctx), items);
      return { apiVersion, reap: outcome.reap.map((r) => ({ kind: r.kind, name: r.name })) };
    },
    events: (reqs, ctx) => ingestRequests(deps.streams, "events", EventsRequestSchema, reqs, ctx),
    logs: (reqs, ctx) => ingestRequests(deps.streams, "logs", LogsRequestSchema, reqs, ctx),
    ...runnerArtifactHandlers(deps.artifacts),
  };
}

/** ClaimResponse: `leases` in pick order, `lease` the first of them; nothing when none. */
/**
 * The claim's reply; one that leased nothing says whether the runner was ordered to drain (one
 * read, only then).
 */
async function claimResponse(
  broker: Pick<Broker, "drainOrdered">,
  runner: { workspaceId: string; runnerId: string },
  leases: readonly LeaseView[],
) {
  if (leases.length) return { lease: leaseMessage(leases[0]!), leases: leases.map(leaseMessage) };
  return (await broker.drainOrdered(runner)) ? { drain: true } : {};
}

/** A protobuf Timestamp from nanoseconds since the epoch. */
function timestampFromNs(ns: bigint): Timestamp {
  return {
    $typeName: "google.protobuf.Timestamp",
    seconds: ns / 1_000_000_000n,
    nanos: Number(ns % 1_000_000_000n),
  };
}
