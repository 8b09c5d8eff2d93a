// What each sealed value is bound to (its associated data): the row it
// belongs to, so a value copied into another row, or another column, does
// not open. Written once here; the broker, the code host and the rotation
// all seal and open through these.

/** A job secret: its job, kind ("env" or "file") and name. */
export function jobSecretBinding(jobId: string, kind: "env" | "file", name: string): string {
  return `job_secrets/${jobId}/${kind}/${name}`;
}

/** A pipeline step's secret, copied (opened and sealed again) into each job of the step. */
export function pipelineStepSecretBinding(
  pipelineId: string,
  step: string,
  kind: "env" | "file",
  name: string,
): string {
  return `pipeline_step_secrets/${pipelineId}/${step}/${kind}/${name}`;
}

/** A repository's credential. */
export function repositoryCredentialBinding(name: string): string {
  return `repositories/${name}/credential`;
}

/** A webhook subscription's signing secret. */
export function webhookSecretBinding(subscriptionId: string): string {
  return `webhook_subscriptions/${subscriptionId}/secret`;
}

/** The check value of a key id (secrets_keys). */
export function keyCheckBinding(keyId: number): string {
  return `secrets_keys/${keyId}`;
}

/** The value a key check row seals. */
export const keyCheckValue = "forelead secrets key check";

/**
 * A schedule template's secret: its schedule, step ("" for a job template), kind and name; opened
 * and sealed again into each job a fire enqueues.
 */
export function scheduleSecretBinding(
  scheduleId: string,
  step: string,
  kind: "env" | "file",
  name: string,
): string {
  return `schedule_secrets/${scheduleId}/${step}/${kind}/${name}`;
}
