import { Code, ConnectError, type ServiceImpl } from "@connectrpc/connect";
import type { Timestamp } from "@bufbuild/protobuf/wkt";
import type { RunnerService } from "../../gen/forelead/runner/v1/runner_pb.js";
import { register } from "../broker/registrations.js";
import type { DbClock } from "../store/db-clock.js";
import type { Store } from "../store/database.js";
import { runnerOf } from "./context.js";
import { apiVersion } from "./request-rules.js";

/** What the runner service binds to. */
export interface RunnerServiceDeps {
  readonly store: Store;
  readonly clock: DbClock;
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

    claim: notYet("claim"),
    renew: notYet("renew"),
    release: notYet("release"),
    complete: notYet("complete"),
    codeHead: notYet("code/head"),
    // eslint-disable-next-line require-yield
    codeBundle: async function* () {
      notYet("code/bundle")();
    },
    inventory: notYet("inventory"),
    events: notYet("events"),
    logs: notYet("logs"),
  };
}

/** A protobuf Timestamp from nanoseconds since the epoch. */
export function timestampFromNs(ns: bigint): Timestamp {
  return { $typeName: "google.protobuf.Timestamp", seconds: ns / 1_000_000_000n, nanos: Number(ns % 1_000_000_000n) };
}
