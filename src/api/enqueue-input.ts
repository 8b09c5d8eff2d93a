import type { EnqueueJobRequest } from "../../gen/forelead/admin/v1/admin_pb.js";
import type { EnqueueInput } from "../broker/jobs/rules.js";
import { scheduleFieldsOf } from "./schedule-fields.js";

/**
 * An EnqueueJobRequest as the broker takes it (validated there, by validateEnqueue), owned by
 * `enqueuedBy`.
 */
export function enqueueInputOf(req: EnqueueJobRequest, enqueuedBy: string): EnqueueInput {
  const spec = req.spec;
  return {
    workspaceId: req.workspaceId,
    labels: req.labels,
    repository: req.repository,
    targetBranch: req.targetBranch,
    spec: spec && {
      image: spec.image,
      argv: spec.argv,
      env: spec.env,
      timeoutSeconds: spec.timeoutSeconds,
      cpu: spec.cpu,
      memoryBytes: Number(spec.memoryBytes),
    },
    maxAttempts: req.maxAttempts,
    priority: req.priority,
    idempotencyKey: req.idempotencyKey,
    kind: req.kind,
    enqueuedBy,
    secrets: req.secrets,
    secretFiles: req.secretFiles,
    concurrencyPolicy: req.concurrencyPolicy,
    maxPending: req.maxPending,
    onFull: req.onFull,
    displayName: req.displayName,
    ...scheduleFieldsOf(req),
  };
}
