// The launcher's names for what a runner creates in Docker. They must equal
// src/inventory/names.ts (issue 6), which the control plane uses to accept
// inventory items; the two are folded into one module when both have landed.

/** The task name of a job's only container. */
export const mainTask = "main";

/** The container of `task` of `jobId`: forelead-<jobId>-<task>. */
export function containerName(jobId: string, task: string = mainTask): string {
  return `forelead-${jobId}-${task}`;
}

/** The network of `jobId`: forelead-<jobId>. */
export function networkName(jobId: string): string {
  return `forelead-${jobId}`;
}

/** The label keys every container and network a runner creates carries. */
export const labelKeys = {
  runner: "forelead.runner",
  workspace: "forelead.workspace",
  task: "forelead.task",
  job: "forelead.job",
} as const;

/** The four forelead.* labels of a resource created for `task` of `jobId`. */
export function resourceLabels(runnerId: string, workspaceId: string, jobId: string, task: string = mainTask): Record<string, string> {
  return { [labelKeys.runner]: runnerId, [labelKeys.workspace]: workspaceId, [labelKeys.task]: task, [labelKeys.job]: jobId };
}
