import { create, fromJson, type JsonValue } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { JobSchema, LeaseSchema, type Job, type Lease } from "../../gen/forelead/runner/v1/job_pb.js";
import type { JobSnapshot } from "../broker/job-snapshot.js";
import type { LeaseView } from "../broker/leases.js";
import { apiVersion } from "./request-rules.js";

/** The proto Job of a broker snapshot (the snapshot is already proto3 JSON). */
export function jobMessage(snapshot: JobSnapshot): Job {
  return fromJson(JobSchema, snapshot as JsonValue, { ignoreUnknownFields: true });
}

/** The proto Lease of a broker lease view; secrets only when the view carries them (the claim that issued it). */
export function leaseMessage(view: LeaseView): Lease {
  return create(LeaseSchema, {
    apiVersion,
    token: view.token ?? "",
    expiresAt: timestampFromDate(view.expiresAt),
    cancelRequested: view.cancelRequested,
    job: jobMessage(view.job),
    ...(view.secrets ? { secrets: view.secrets.secrets, secretFiles: view.secrets.secretFiles } : {}),
  });
}
