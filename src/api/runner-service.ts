import { Code, ConnectError, type ServiceImpl } from "@connectrpc/connect";
import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import { EventsRequestSchema, LogsRequestSchema, type RunnerService } from "../../gen/forelead/runner/v1/runner_pb.js";
import { register } from "../broker/registrations.js";
import type { DbClock } from "../store/db-clock.js";
import type { Store } from "../store/database.js";
import type { Broker } from "../broker/broker.js";
import type { Inventory } from "../inventory/inventory.js";
import type { Streams } from "../streams/streams.js";
import { runnerOf } from "./context.js";
import { jobMessage, leaseMessage } from "./job-view.js";
import { apiVersion } from "./request-rules.js";
import { ingestRequests } from "./stream-handlers.js";

/** What the runner service binds to. */
export interface RunnerServiceDeps {
  readonly store: Store;
  readonly clock: DbClock;
  readonly broker: Broker;
  readonly inventory: Inventory;
  readonly streams: Streams;
}

/** Runner protocol v1: each handler decodes nothing itself, calls the domain, shapes the reply. */
export function createRunnerService(deps: RunnerServiceDeps): ServiceImpl<typeof RunnerService> {
  const notYet = (what: string) => () => {
    throw new ConnectError(`${what} is not served by this control plane yet`, Code.Unimplemented);
  };
  return {
    clock: () => ({ apiVersion, serverTime: timestampFromNs(deps.clock.nowNs()) }),

    async register(req, ctx) {
      const runner = runnerOf(ctx);
      await register(deps.store.db, {
        workspaceId: runner.workspaceId,
        runnerId: runner.runnerId,
        slots: req.slots,
        cpu: req.cpu,
        memoryBytes: Number(req.memoryBytes),
        architecture: req.architecture,
        labels: req.labels,
        clockOffsetNs: Number(req.clockOffsetNs),
      });
      return { apiVersion };
    },

    async claim(req, ctx) {
      const lease = await deps.broker.claim(runnerOf(ctx), req.waitSeconds, ctx.signal);
      return lease ? { lease: leaseMessage(lease) } : {};
    },

    async renew(req, ctx) {
      return { lease: leaseMessage(await deps.broker.renew({ ...runnerOf(ctx), jobId: req.jobId, leaseToken: req.leaseToken })) };
    },

    async release(req, ctx) {
      await deps.broker.release({ ...runnerOf(ctx), jobId: req.jobId, leaseToken: req.leaseToken });
      return {};
    },

    async complete(req, ctx) {
      const job = await deps.broker.complete({
        ...runnerOf(ctx),
        jobId: req.jobId,
        leaseToken: req.leaseToken,
        completionId: req.completionId,
        outcome: req.outcome,
        exitCode: req.exitCode,
        error: req.error,
      });
      return { apiVersion, job: jobMessage(job) };
    },

    codeHead: notYet("code/head"),
    // eslint-disable-next-line require-yield
    codeBundle: async function* () {
      notYet("code/bundle")();
    },
    async inventory(req, ctx) {
      const items = req.items.map((i) => ({ ...i, createdAt: i.createdAt ? timestampDate(i.createdAt) : undefined }));
      const outcome = await deps.inventory.report(runnerOf(ctx), items);
      return { apiVersion, reap: outcome.reap.map((r) => ({ kind: r.kind, name: r.name })) };
    },
    events: (reqs, ctx) => ingestRequests(deps.streams, "events", EventsRequestSchema, reqs, ctx),
    logs: (reqs, ctx) => ingestRequests(deps.streams, "logs", LogsRequestSchema, reqs, ctx),
  };
}

/** A protobuf Timestamp from nanoseconds since the epoch. */
export function timestampFromNs(ns: bigint): Timestamp {
  return { $typeName: "google.protobuf.Timestamp", seconds: ns / 1_000_000_000n, nanos: Number(ns % 1_000_000_000n) };
}
