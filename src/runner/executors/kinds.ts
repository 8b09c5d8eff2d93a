import { createDockerExecutor } from "./docker-executor.js";
import type { Executor } from "./executor.js";
import { createProcessExecutor } from "./process-executor.js";

/** The runner an executor works for: what it creates carries these names. */
export interface ExecutorOwner {
  readonly runnerId: string;
  readonly workspaceId: string;
}

/**
 * Every executor a runner can use, by the name `forelead runner --executor` takes; a new executor
 * is one line here.
 */
export const executors = {
  docker: (owner: ExecutorOwner) => createDockerExecutor(owner),
  process: () => createProcessExecutor(),
} as const satisfies Record<string, (owner: ExecutorOwner) => Executor>;

/** The name of an executor: docker, process. */
export type ExecutorKind = keyof typeof executors;

/** The executor of `kind` for `owner`. */
export function createExecutor(kind: ExecutorKind, owner: ExecutorOwner): Executor {
  return executors[kind](owner);
}
