import type { DockerContainer, DockerStats } from "./docker-api.js";
import type { ResourceSampler, ResourceUsage } from "./executor.js";

/**
 * Memory as `docker stats` shows it: usage less the inactive page cache
 * (which the kernel reclaims before it would kill the container).
 */
function dockerMemoryBytes(m: DockerStats["memory_stats"]): number | undefined {
  if (m?.usage === undefined) return undefined;
  const cache = m.stats?.inactive_file ?? m.stats?.total_inactive_file ?? 0;
  return cache < m.usage ? m.usage - cache : m.usage;
}

/**
 * Samples a job's container with one-shot stats (`stream: false`): CPU is
 * the change of the cgroup's total CPU time (ns) over the wall time since
 * the previous reading, which is the interval's average and needs no
 * precpu_stats; memory is dockerMemoryBytes. `running()` gives the
 * container and when it started (performance.now()) while it runs, and
 * undefined before it started or after it ended.
 */
export function containerSampler(
  running: () => { readonly container: DockerContainer; readonly startedAtMs: number } | undefined,
): ResourceSampler {
  let last: { cpuNs: number; atMs: number } | undefined;
  return {
    async sample(): Promise<ResourceUsage | undefined> {
      const live = running();
      if (!live) return undefined;
      const stats = await live.container
        .stats({ stream: false, "one-shot": true })
        .catch(() => undefined);
      const cpuNs = stats?.cpu_stats?.cpu_usage?.total_usage;
      const memoryBytes = dockerMemoryBytes(stats?.memory_stats);
      // ended meanwhile: no figures
      if (cpuNs === undefined || memoryBytes === undefined) return undefined;
      const atMs = performance.now();
      const previous = last ?? { cpuNs: 0, atMs: live.startedAtMs };
      last = { cpuNs, atMs };
      const seconds = (atMs - previous.atMs) / 1000;
      return {
        cpuCores: seconds > 0 ? Math.max(0, cpuNs - previous.cpuNs) / 1e9 / seconds : 0,
        memoryBytes,
      };
    },
  };
}
