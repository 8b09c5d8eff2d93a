import { create, type JsonValue } from "@bufbuild/protobuf";
import { timestampFromDate, ValueSchema } from "@bufbuild/protobuf/wkt";
import {
  ArtifactSchema,
  JobSchema,
  LeaseSchema,
  type Job,
  type Lease,
} from "../../gen/forelead/runner/v1/job_pb.js";
import type { JobSnapshot } from "../broker/jobs/snapshot.js";
import type { LeaseView } from "../broker/leases/views.js";
import { decodeJson } from "../protocol/json/codec.js";
import { looksSecret, maskedValue } from "../protocol/secret-names.js";
import { apiVersion } from "./request-rules.js";

/**
 * The proto Job of a broker snapshot, as every view shows it: spec.env values
 * whose names look secret (`looksSecret`) are "***", for every role. Only a
 * lease (`leaseMessage`) carries the real values, to the runner that runs it.
 */
export function jobMessage(snapshot: JobSnapshot): Job {
  const job = unmaskedJob(snapshot);
  const env = job.spec?.env;
  if (env) for (const name of Object.keys(env)) if (looksSecret(name)) env[name] = maskedValue;
  return job;
}

/** The proto Job of a broker snapshot (the snapshot is already proto3 JSON), env as enqueued. */
function unmaskedJob(snapshot: JobSnapshot): Job {
  return decodeJson(JobSchema, snapshot as JsonValue);
}

/**
 * The proto Lease of a broker lease view; secrets only when the view carries them (the claim that
 * issued it).
 */
export function leaseMessage(view: LeaseView): Lease {
  return create(LeaseSchema, {
    apiVersion,
    token: view.token ?? "",
    expiresAt: timestampFromDate(view.expiresAt),
    cancelRequested: view.cancelRequested,
    drain: view.drain,
    job: unmaskedJob(view.job),
    attempt: view.attempt,
    secrets: view.secrets?.secrets,
    secretFiles: view.secrets?.secretFiles,
    inputRequestId: view.input?.requestId,
    inputAnswer: view.input ? decodeJson(ValueSchema, view.input.answer as JsonValue) : undefined,
    checkpoint: view.input?.checkpoint.map((a) => decodeJson(ArtifactSchema, a as JsonValue)),
    inputs: view.inputs?.map((i) => ({ ...i, size: BigInt(i.size) })),
  });
}
