import type { ResourceSampler } from "../executors/executor.js";
import type { EventSink } from "../output/output.js";
import type { ServerClock } from "./clock.js";

/** How often a running job's CPU and memory are sent, unless the agent is told otherwise. */
export const defaultSampleIntervalMs = 5000;

/** The event type a sample is sent as, on the job's events stream. */
const resourceSampleEvent = "resource.sample";

/** A sampling loop of one job. */
export interface ResourceSamples {
  /**
   * Stops sampling; resolves once a reading in flight is sent or dropped, so no sample follows
   * job.exited.
   */
  stop(): Promise<void>;
}

/**
 * Sends `{type: "resource.sample", cpuCores, memoryBytes, at}` on the job's
 * events every `intervalMs` while it runs: cpuCores is the average over the
 * interval, memoryBytes the use at `at` (the control plane's clock, RFC 3339).
 * A reading that fails or finds the job gone is skipped, not sent.
 */
export function startResourceSamples(
  sampler: ResourceSampler | undefined,
  intervalMs: number,
  events: EventSink,
  clock: ServerClock,
): ResourceSamples {
  if (!sampler || intervalMs <= 0) return { stop: async () => {} };
  let stopped = false;
  let inFlight: Promise<void> = Promise.resolve();
  const tick = async () => {
    const usage = await sampler.sample().catch(() => undefined);
    if (stopped || !usage) return;
    events.event({
      type: resourceSampleEvent,
      cpuCores: Math.round(usage.cpuCores * 1000) / 1000,
      memoryBytes: usage.memoryBytes,
      at: new Date(clock.nowMs()).toISOString(),
    });
  };
  const timer = setInterval(() => {
    // One reading at a time: a slow one (a busy engine) skips a beat instead of piling up.
    inFlight = inFlight.then(tick);
  }, intervalMs);
  return {
    async stop() {
      stopped = true;
      clearInterval(timer);
      await inFlight;
    },
  };
}
