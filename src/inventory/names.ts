/**
 * The launcher's names: the one definition of how the runner names the
 * containers and networks it creates, and how the control plane recognises
 * them in an inventory report. The runner agent builds names with
 * `containerName` / `networkName` and labels with `launcherLabels`; the control
 * plane checks reported names with `parseLauncherName`. docs/launcher-names.md
 * describes the same rules in prose.
 *
 *   container  forelead-<jobId>-<task>   e.g. forelead-0190f1e2-3c4d-7e5f-8a9b-0c1d2e3f4a5b-main
 *   network    forelead-<jobId>          e.g. forelead-0190f1e2-3c4d-7e5f-8a9b-0c1d2e3f4a5b
 *
 * jobId is a lowercase UUID (36 characters, as src/broker/ids.ts makes them);
 * task is 1..31 characters of [a-z0-9-] starting with a letter or digit. Both
 * fit Docker's name rule [a-zA-Z0-9][a-zA-Z0-9_.-]* and stay well under any
 * length limit (longest container name: 77 characters). Because the jobId has
 * a fixed length, a name splits in exactly one way.
 */

/** The two kinds of resource the launcher creates. */
export type LauncherKind = "container" | "network";

/** Every launcher name starts with this. */
const launcherPrefix = "forelead-";

/** A task name: 1..31 of [a-z0-9-], first character a letter or digit. */
const taskPattern = /^[a-z0-9][a-z0-9-]{0,30}$/;

/** A job id as it appears in a name: a lowercase UUID. */
const jobIdPattern = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

const jobIdLength = 36;

/** The longest launcher name (a container with a 31-character task). */
export const maxLauncherNameLength = launcherPrefix.length + jobIdLength + 1 + 31;

/** The Docker labels every launcher resource carries. */
export const launcherLabelKeys = {
  runner: "forelead.runner",
  workspace: "forelead.workspace",
  task: "forelead.task",
  job: "forelead.job",
} as const;

/** True when `kind` is a LauncherKind. */
function isLauncherKind(kind: string): kind is LauncherKind {
  return kind === "container" || kind === "network";
}

/** True when `task` follows taskPattern. */
function isTaskName(task: string): boolean {
  return taskPattern.test(task);
}

/** True when `jobId` is a lowercase UUID. */
function isNameJobId(jobId: string): boolean {
  return jobIdPattern.test(jobId);
}

/** The container name for `task` of job `jobId`; throws RangeError on an invalid jobId or task. */
export function containerName(jobId: string, task: string): string {
  checkJobIdForName(jobId);
  if (!isTaskName(task)) {
    throw new RangeError(
      `task ${JSON.stringify(task.slice(0, 80))} is not a task name: 1..31 of ` +
        `[a-z0-9-], starting with a letter or digit`,
    );
  }
  return `${launcherPrefix}${jobId}-${task}`;
}

/** The network name of job `jobId`; throws RangeError on an invalid jobId. */
export function networkName(jobId: string): string {
  checkJobIdForName(jobId);
  return `${launcherPrefix}${jobId}`;
}

/**
 * The labels of a launcher resource. Networks belong to the whole job, so
 * their `forelead.task` label is the empty string.
 */
export function launcherLabels(owner: {
  readonly runnerId: string;
  readonly workspaceId: string;
  readonly jobId: string;
  readonly task?: string;
}): Record<string, string> {
  return {
    [launcherLabelKeys.runner]: owner.runnerId,
    [launcherLabelKeys.workspace]: owner.workspaceId,
    [launcherLabelKeys.task]: owner.task ?? "",
    [launcherLabelKeys.job]: owner.jobId,
  };
}

/** A name the launcher generates, taken apart. */
export interface ParsedLauncherName {
  readonly ok: true;
  readonly kind: LauncherKind;
  readonly jobId: string;
  /** The task, for containers; undefined for networks. */
  readonly task: string | undefined;
}

/** Why a name is not one the launcher generates. */
export interface LauncherNameRefusal {
  readonly ok: false;
  readonly reason: string;
}

/**
 * Takes `name` apart as a launcher name of `kind`, or says why it is not one.
 * Strict on purpose: no leading "/" (Docker's inspect output has one; strip it
 * before reporting), no uppercase, no other prefix.
 */
export function parseLauncherName(
  kind: string,
  name: string,
): ParsedLauncherName | LauncherNameRefusal {
  const refuse = (reason: string): LauncherNameRefusal => ({ ok: false, reason });
  if (!isLauncherKind(kind))
    return refuse(`kind ${JSON.stringify(kind.slice(0, 40))} is not "container" or "network"`);
  if (name.length > maxLauncherNameLength)
    return refuse(`name is longer than ${maxLauncherNameLength} characters`);
  const shown = JSON.stringify(name);
  if (!name.startsWith(launcherPrefix)) {
    const hint = name.startsWith("/") ? ' (strip Docker\'s leading "/")' : "";
    return refuse(`name ${shown} does not start with "${launcherPrefix}"${hint}`);
  }
  const jobId = name.slice(launcherPrefix.length, launcherPrefix.length + jobIdLength);
  if (!isNameJobId(jobId))
    return refuse(
      `name ${shown} does not carry a lowercase job id (UUID) after "${launcherPrefix}"`,
    );
  const rest = name.slice(launcherPrefix.length + jobIdLength);
  if (kind === "network") {
    if (rest !== "")
      return refuse(
        `name ${shown} is not a network name: expected "${launcherPrefix}<jobId>" with nothing after the job id`,
      );
    return { ok: true, kind, jobId, task: undefined };
  }
  if (!rest.startsWith("-"))
    return refuse(
      `name ${shown} is not a container name: expected "${launcherPrefix}<jobId>-<task>"`,
    );
  const task = rest.slice(1);
  if (!isTaskName(task)) {
    return refuse(
      `name ${shown} has task ${JSON.stringify(task)}, which is not 1..31 of [a-z0-9-] starting with a letter or digit`,
    );
  }
  return { ok: true, kind, jobId, task };
}

function checkJobIdForName(jobId: string): void {
  if (!isNameJobId(jobId))
    throw new RangeError(`jobId ${JSON.stringify(jobId.slice(0, 80))} is not a lowercase UUID`);
}
