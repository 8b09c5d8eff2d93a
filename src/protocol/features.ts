import { suspendFeatures } from "./input-request.js";

/**
 * The feature names a runner declares at registration (register's
 * `features`; docs/protocol.md "Capabilities", docs/job-contract.md
 * "Features"): the one list, shared by the runner agent that declares them
 * and the conformance kit whose rows require them. A name ends in its
 * version; a changed meaning gets a new name, never a new meaning of an old one.
 */
export const features = {
  /** A cancel learned on renew stops the job (docs/protocol.md). */
  cancel: "cancel-v1",
  /**
   * `::forelead::progress` lines reach the job view and job.progress events (docs/job-contract.md).
   */
  progress: "progress-v1",
  /**
   * output/result.json and `::forelead::result` lines are sent as the completion's result
   * (docs/job-contract.md).
   */
  result: "result-v1",
} as const;

/** The job-contract features every `forelead runner` implements, whichever executor. */
export const jobContractFeatures: readonly string[] = [features.progress, features.result];

/** What a runner declares to be let suspend jobs: checkpoint-v1 and input-v1 (docs/suspend.md). */
export { suspendFeatures };
