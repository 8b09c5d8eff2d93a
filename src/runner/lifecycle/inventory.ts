import type { InventoryItemJson, RunnerClient } from "../transport/client.js";
import { RunnerApiError } from "../transport/client.js";
import type { Executor, ExecutorResource } from "../executors/executor.js";

/** Options of the inventory loop. */
export interface InventoryOptions {
  readonly client: RunnerClient;
  readonly executor: Executor;
  /** The jobs this runner is running right now: anything else's resources are orphans. */
  readonly liveJobs: () => ReadonlySet<string>;
  readonly log: (message: string) => void;
  /** About 15 s by default. */
  readonly intervalMs?: number;
}

/** The inventory loop; `stop` ends it. */
export interface InventoryLoop {
  /** Reports once now; resolves with the reap orders obeyed. */
  reportNow(): Promise<Array<{ kind: string; name: string }>>;
  stop(): void;
}

/**
 * Reports what the executor really has (for Docker: containers and networks
 * labelled forelead.runner = this runner) about every 15 s, each marked
 * orphan when no job running here owns it; a runner restarted after a crash
 * therefore reports its leftovers as orphans. Reap orders in the reply are
 * obeyed only for items that are still orphans when the order arrives.
 */
export function startInventory(options: InventoryOptions): InventoryLoop {
  const { client, executor, log } = options;
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  let unsupportedWarned = false;

  const isOrphan = (r: ExecutorResource) => !options.liveJobs().has(r.jobId);

  const reportNow = async () => {
    const resources = await executor.resources();
    let orders;
    try {
      orders = await client.inventory(resources.map((r) => itemOf(r, isOrphan(r))));
    } catch (err) {
      if (err instanceof RunnerApiError && err.status === 501) {
        if (!unsupportedWarned)
          log(
            "the control plane does not take inventory yet (501 on /v1/runner/inventory); leftovers are not reported",
          );
        unsupportedWarned = true;
        return [];
      }
      throw err;
    }
    const obeyed = [];
    for (const order of orders) {
      if (order.kind !== "container" && order.kind !== "network") continue;
      // Looked up again: the order may be older than a job that now owns the name.
      const now = (await executor.resources()).find(
        (r) => r.kind === order.kind && r.name === order.name,
      );
      if (!now || !isOrphan(now)) {
        log(
          `reap order for ${order.kind} ${order.name} ignored: ${now ? "a live job owns it" : "it is gone already"}`,
        );
        continue;
      }
      await executor.remove(order.kind, order.name);
      log(`reaped orphan ${order.kind} ${order.name}`);
      obeyed.push({ kind: order.kind, name: order.name });
    }
    return obeyed;
  };

  const tick = async () => {
    try {
      await reportNow();
    } catch (err) {
      log(`inventory report failed: ${(err as Error).message}`);
    }
    if (!stopped) timer = setTimeout(tick, options.intervalMs ?? 15_000);
  };
  if (executor.reportsInventory) timer = setTimeout(tick, 0);

  return {
    reportNow,
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
  };
}

function itemOf(r: ExecutorResource, orphan: boolean): InventoryItemJson {
  return {
    kind: r.kind,
    name: r.name,
    jobId: r.jobId,
    state: r.state,
    image: r.image || undefined,
    createdAt: r.createdAt?.toISOString(),
    cpu: r.cpu,
    memory: r.memoryBytes === undefined ? undefined : String(r.memoryBytes),
    orphan,
  };
}
