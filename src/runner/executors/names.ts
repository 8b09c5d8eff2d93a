import {
  containerName as launcherContainerName,
  launcherLabelKeys,
  launcherLabels,
} from "../../inventory/names.js";

// The launcher's names and labels are defined once, in src/inventory/names.ts,
// which the control plane also uses to accept inventory items; this module
// only adds the runner's own default task.

export { networkName } from "../../inventory/names.js";

/** The task name of a job's only container. */
export const mainTask = "main";

/** The label keys every container and network a runner creates carries. */
export const labelKeys = launcherLabelKeys;

/** The container of `task` of `jobId`: forelead-<jobId>-<task>. */
export function containerName(jobId: string, task: string = mainTask): string {
  return launcherContainerName(jobId, task);
}

/**
 * The four forelead.* labels of a container (with its task) or of a job's network (task omitted:
 * "").
 */
export function resourceLabels(
  runnerId: string,
  workspaceId: string,
  jobId: string,
  task?: string,
): Record<string, string> {
  return launcherLabels({ runnerId, workspaceId, jobId, task });
}
