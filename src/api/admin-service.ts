import type { ServiceImpl } from "@connectrpc/connect";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { AdminService } from "../../gen/forelead/admin/v1/admin_pb.js";
import type { Broker } from "../broker/broker.js";
import { audited } from "./audit-actions.js";
import type { Inventory } from "../inventory/inventory.js";
import type { CodeHost } from "../code/code-host.js";
import type { RepositoryView } from "../code/repositories.js";
import type { Artifacts } from "../artifacts/artifacts.js";
import { adminArtifactHandlers } from "./artifact-handlers.js";
import type { Streams } from "../streams/streams.js";
import { jobReaderOf, principalOf } from "./context.js";
import { createIdentityAdminMethods, type IdentityAdminDeps } from "./identity-admin.js";
import { createInventoryAdminMethods } from "./inventory-admin.js";
import { enqueueInputOf } from "./enqueue-input.js";
import { jobMessage } from "./job-view.js";
import { apiVersion } from "./request-rules.js";
import { streamEntries } from "./stream-handlers.js";
import { parseTimeRange } from "./time-range.js";

/** What the admin service binds to. */
export interface AdminServiceDeps extends IdentityAdminDeps {
  readonly broker: Broker;
  readonly inventory: Inventory;
  readonly code: CodeHost;
  readonly artifacts: Artifacts;
  readonly streams: Streams;
}

/** The admin surface for internal services: decode, call the broker, encode. */
export function createAdminService(deps: AdminServiceDeps): ServiceImpl<typeof AdminService> {
  const { broker } = deps;
  return {
    async enqueueJob(req, ctx) {
      const enqueue = () => broker.enqueue(enqueueInputOf(req, principalOf(ctx).spiffeId.text));
      const job = await audited(
        ctx,
        "job.enqueue",
        `workspace "${req.workspaceId.slice(0, 140)}"`,
        enqueue,
        (j) => ({
          target: `job ${String(j.id)} in workspace "${String(j.workspaceId)}"`,
          reason: `job ${String(j.id)} is ${String(j.state)}`,
        }),
      );
      return { apiVersion, job: jobMessage(job) };
    },
    async getJob(req) {
      return { apiVersion, job: jobMessage(await broker.get(req.jobId)) };
    },
    async listJobs(req, ctx) {
      const { since: _since, until: _until, ...filter } = req;
      const page = await broker.list({
        ...filter,
        ...parseTimeRange(req, new Date()),
        visibleTo: jobReaderOf(ctx),
      });
      return { apiVersion, jobs: page.jobs.map(jobMessage), nextPageToken: page.nextPageToken };
    },
    async cancelJob(req, ctx) {
      const cancel = () => broker.cancel(req.jobId, principalOf(ctx).spiffeId.text);
      const job = await audited(
        ctx,
        "job.cancel",
        `job ${req.jobId.slice(0, 80)}`,
        cancel,
        (j) => ({
          target: `job ${String(j.id)} in workspace "${String(j.workspaceId)}"`,
          reason:
            `job ${String(j.id)} is ` +
            `${String(j.state)}` +
            `${j.cancelRequested && j.state === "running" ? "; cancel requested from its runner" : ""}`,
        }),
      );
      return { apiVersion, job: jobMessage(job) };
    },
    async registerRepository(req, ctx) {
      const repository = await deps.code.register(
        { name: req.name, url: req.url, credential: req.credential },
        principalOf(ctx).spiffeId.text,
      );
      return { apiVersion, repository: repositoryMessage(repository) };
    },
    async listRepositories() {
      return { apiVersion, repositories: (await deps.code.list()).map(repositoryMessage) };
    },
    async listRunners(req) {
      const runners = await broker.runners(req.workspaceId);
      return {
        apiVersion,
        runners: runners.map((r) => ({
          runnerId: r.runnerId,
          workspaceId: r.workspaceId,
          slots: r.slots,
          cpu: r.cpu,
          memoryBytes: BigInt(r.memoryBytes),
          architecture: r.architecture,
          labels: [...r.labels],
          clockOffsetNs: BigInt(r.clockOffsetNs),
          os: r.os,
          executionKinds: [...r.executionKinds],
          features: [...r.features],
          maxConcurrency: r.maxConcurrency,
          liveLeases: r.liveLeases,
          registeredAt: timestampFromDate(r.registeredAt),
          lastSeenAt: timestampFromDate(r.lastSeenAt),
          retiredAt: r.retiredAt ? timestampFromDate(r.retiredAt) : undefined,
          ...(r.pausedAt
            ? { pausedAt: timestampFromDate(r.pausedAt), pausedBy: r.pausedBy ?? "" }
            : {}),
          state: r.state,
          version: r.version,
        })),
      };
    },
    ...createIdentityAdminMethods(deps),
    ...createInventoryAdminMethods(deps.inventory),
    ...adminArtifactHandlers(deps.artifacts),
    getJobLogs: (req, ctx) => streamEntries(deps.streams, "logs", req, ctx),
    getJobEvents: (req, ctx) => streamEntries(deps.streams, "events", req, ctx),
  };
}

function repositoryMessage(r: RepositoryView) {
  return {
    name: r.name,
    url: r.url,
    hasCredential: r.hasCredential,
    createdAt: timestampFromDate(r.createdAt),
    updatedAt: timestampFromDate(r.updatedAt),
  };
}
