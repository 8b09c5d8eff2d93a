import type { ServiceImpl } from "@connectrpc/connect";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { AdminService } from "../../gen/forelead/admin/v1/admin_pb.js";
import type { Broker } from "../broker/broker.js";
import type { Inventory } from "../inventory/inventory.js";
import type { Streams } from "../streams/streams.js";
import { principalOf } from "./context.js";
import { createInventoryAdminMethods } from "./inventory-admin.js";
import { jobMessage } from "./job-view.js";
import { apiVersion } from "./request-rules.js";
import { streamEntries } from "./stream-handlers.js";

/** What the admin service binds to. */
export interface AdminServiceDeps {
  readonly broker: Broker;
  readonly inventory: Inventory;
  readonly streams: Streams;
}

/** The admin surface for internal services: decode, call the broker, encode. */
export function createAdminService(deps: AdminServiceDeps): ServiceImpl<typeof AdminService> {
  const { broker } = deps;
  return {
    async enqueueJob(req) {
      const spec = req.spec;
      const job = await broker.enqueue({
        workspaceId: req.workspaceId,
        labels: req.labels,
        repository: req.repository,
        targetBranch: req.targetBranch,
        spec: spec && { image: spec.image, argv: spec.argv, env: spec.env, timeoutSeconds: spec.timeoutSeconds, cpu: spec.cpu, memoryBytes: Number(spec.memoryBytes) },
        maxAttempts: req.maxAttempts,
        priority: req.priority,
        idempotencyKey: req.idempotencyKey,
      });
      return { apiVersion, job: jobMessage(job) };
    },
    async getJob(req) {
      return { apiVersion, job: jobMessage(await broker.get(req.jobId)) };
    },
    async listJobs(req) {
      const page = await broker.list(req);
      return { apiVersion, jobs: page.jobs.map(jobMessage), nextPageToken: page.nextPageToken };
    },
    async cancelJob(req, ctx) {
      return { apiVersion, job: jobMessage(await broker.cancel(req.jobId, principalOf(ctx).spiffeId.text)) };
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
          liveLeases: r.liveLeases,
          registeredAt: timestampFromDate(r.registeredAt),
          lastSeenAt: timestampFromDate(r.lastSeenAt),
          ...(r.retiredAt ? { retiredAt: timestampFromDate(r.retiredAt) } : {}),
        })),
      };
    },
    ...createInventoryAdminMethods(deps.inventory),
    getJobLogs: (req, ctx) => streamEntries(deps.streams, "logs", req, ctx),
    getJobEvents: (req, ctx) => streamEntries(deps.streams, "events", req, ctx),
  };
}
