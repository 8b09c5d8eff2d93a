import type { ServiceImpl } from "@connectrpc/connect";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { SamplesService } from "../../gen/forelead/admin/v1/samples_pb.js";
import type { ResourceAdvice } from "../streams/sizing.js";
import type { Streams } from "../streams/streams.js";
import { apiVersion } from "./request-rules.js";
import { parseTimeBound } from "./time-range.js";

/** What the samples service binds to. */
export type SamplesServiceDeps = Pick<Streams, "samples" | "sizing">;

/** How far back sizing looks when the request gives no `since`. */
const defaultSizingSince = "7d";

/** Per-job resource samples and sizing advice: decode, query, encode. */
export function createSamplesService(deps: SamplesServiceDeps): ServiceImpl<typeof SamplesService> {
  return {
    async getJobSamples(req) {
      const found = await deps.samples(req.jobId);
      return {
        apiVersion,
        jobId: req.jobId.toLowerCase(),
        samples: found.samples.map((s) => ({
          at: timestampFromDate(s.at),
          cpuCores: s.cpuCores,
          memoryBytes: BigInt(Math.round(s.memoryBytes)),
          attempt: s.attempt,
        })),
        peakCpuCores: found.peakCpuCores,
        peakMemoryBytes: BigInt(Math.round(found.peakMemoryBytes)),
      };
    },
    async getSizing(req) {
      const since = parseTimeBound("since", req.since || defaultSizingSince, new Date());
      const groups = await deps.sizing({ since, workspaceId: req.workspaceId });
      return {
        apiVersion,
        since: timestampFromDate(since),
        groups: groups.map((g) => ({
          workspaceId: g.workspaceId,
          labels: [...g.labels],
          image: g.image,
          jobs: BigInt(g.jobs),
          cpu: adviceMessage(g.cpu),
          memory: adviceMessage(g.memory),
        })),
      };
    },
  };
}

function adviceMessage(a: ResourceAdvice) {
  return {
    requested: a.requested,
    p95Peak: a.p95Peak,
    maxPeak: a.maxPeak,
    advice: a.advice,
    suggested: a.suggested,
  };
}
