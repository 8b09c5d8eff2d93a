import type { ServiceImpl } from "@connectrpc/connect";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { StatsService } from "../../gen/forelead/admin/v1/stats_pb.js";
import type { Broker } from "../broker/broker.js";
import type { DurationStats } from "../broker/stats.js";
import { checkSegmentId } from "../identity/segment-id.js";
import { apiVersion } from "./request-rules.js";
import { parseTimeRange } from "./time-range.js";

/** The window a stats request without `since` covers. */
const defaultStatsSince = "24h";

/** The stats surface: resolve the window, ask the broker, encode. */
export function createStatsService(broker: Broker): ServiceImpl<typeof StatsService> {
  return {
    async getStats(req) {
      const now = new Date();
      if (req.workspaceId) checkSegmentId("workspaceId", req.workspaceId);
      const range = parseTimeRange(req, now, { since: defaultStatsSince });
      const since = range.since!;
      const until = range.until ?? now;
      const workspaces = await broker.stats({ since, until, workspaceId: req.workspaceId });
      const count = (n: number) => BigInt(n);
      const counts = (list: ReadonlyArray<{ key: string; count: number }>) =>
        list.map((c) => ({ key: c.key, count: count(c.count) }));
      const durations = (d: DurationStats) => ({
        count: count(d.count),
        p50Seconds: d.p50Seconds,
        p95Seconds: d.p95Seconds,
        maxSeconds: d.maxSeconds,
      });
      return {
        apiVersion,
        since: timestampFromDate(since),
        until: timestampFromDate(until),
        workspaces: workspaces.map((w) => ({
          workspaceId: w.workspaceId,
          jobs: count(w.jobs),
          byState: counts(w.byState),
          byErrorCode: counts(w.byErrorCode),
          attempts: count(w.attempts),
          leaseLosses: count(w.leaseLosses),
          timeouts: count(w.timeouts),
          cancels: count(w.cancels),
          wait: durations(w.wait),
          run: durations(w.run),
          runners: w.runners.map((r) => ({
            runnerId: r.runnerId,
            jobs: count(r.jobs),
            busySeconds: r.busySeconds,
          })),
          fairnessKeys: w.fairnessKeys.map((k) => ({ ...k, started: count(k.started) })),
        })),
      };
    },
  };
}
