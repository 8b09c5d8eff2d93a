import { createDockerExecutor } from "./docker-executor.js";
import type { Executor } from "./executor.js";
import type { JobNetwork } from "./isolation.js";
import { createProcessExecutor } from "./process-executor.js";

/** The runner an executor works for: what it creates carries these names. */
export interface ExecutorOwner {
  readonly runnerId: string;
  readonly workspaceId: string;
}

/** What `forelead runner` sets of an executor besides its owner. */
export interface ExecutorSettings {
  /** --job-network (process executor; the docker executor has its own per-job network). */
  readonly jobNetwork?: JobNetwork;
  readonly log?: (message: string) => void;
}

/**
 * Every executor a runner can use, by the name `forelead runner --executor` takes; a new executor
 * is one line here.
 */
export const executors = {
  docker: (owner: ExecutorOwner) => createDockerExecutor(owner),
  process: (_owner: ExecutorOwner, settings: ExecutorSettings = {}) =>
    createProcessExecutor({ network: settings.jobNetwork, log: settings.log }),
} as const satisfies Record<
  string,
  (owner: ExecutorOwner, settings?: ExecutorSettings) => Executor
>;

/** The name of an executor: docker, process. */
export type ExecutorKind = keyof typeof executors;

/** The executor of `kind` for `owner`. */
export function createExecutor(
  kind: ExecutorKind,
  owner: ExecutorOwner,
  settings: ExecutorSettings = {},
): Executor {
  return executors[kind](owner, settings);
}
