import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import type { Backoff, IdToken, Requirements } from "../../gen/forelead/runner/v1/scheduling_pb.js";
import type { EnqueueInput } from "../broker/jobs/rules.js";

/**
 * The scheduling and requirement fields an EnqueueJobRequest and a PipelineStepRequest share, as
 * decoded messages.
 */
export interface ScheduleMessage {
  readonly runAt?: Timestamp;
  readonly delaySeconds?: bigint;
  readonly concurrencyKey: string;
  readonly concurrencyLimit: number;
  readonly fairnessKey: string;
  readonly rateLimit: string;
  readonly backoff?: Backoff;
  readonly requirements?: Requirements;
  readonly idToken?: IdToken;
}

/** Those fields as the broker takes them (validated there, by validateEnqueue). */
export function scheduleFieldsOf(
  req: ScheduleMessage,
): Pick<
  EnqueueInput,
  | "runAt"
  | "delaySeconds"
  | "concurrencyKey"
  | "concurrencyLimit"
  | "backoff"
  | "requirements"
  | "idToken"
  | "fairnessKey"
  | "rateLimit"
  | "backoff"
  | "requirements"
> {
  return {
    runAt: req.runAt ? timestampDate(req.runAt) : undefined,
    delaySeconds: req.delaySeconds === undefined ? undefined : Number(req.delaySeconds),
    concurrencyKey: req.concurrencyKey,
    concurrencyLimit: req.concurrencyLimit,
    fairnessKey: req.fairnessKey,
    rateLimit: req.rateLimit,
    backoff: req.backoff
      ? {
          initialSeconds: req.backoff.initialSeconds,
          multiplier: req.backoff.multiplier,
          maxSeconds: req.backoff.maxSeconds,
        }
      : undefined,
    requirements: req.requirements
      ? {
          architecture: req.requirements.architecture,
          os: req.requirements.os,
          executionKind: req.requirements.executionKind,
          features: req.requirements.features,
        }
      : undefined,
    idToken: req.idToken ? { allowedAudiences: req.idToken.allowedAudiences } : undefined,
  };
}
