import { Code, ConnectError, type ServiceImpl } from "@connectrpc/connect";
import type { BatchService } from "../../gen/forelead/admin/v1/batch_pb.js";
import type { Broker } from "../broker/broker.js";
import { audited } from "./audit-actions.js";
import { principalOf } from "./context.js";
import { enqueueInputOf } from "./enqueue-input.js";
import { jobMessage } from "./job-view.js";
import { apiVersion, checkApiVersion } from "./request-rules.js";

/**
 * The batch enqueue: each job as EnqueueJob takes it, stored all or nothing
 * by the broker (job-batch.ts). The guard has already checked the caller's
 * enqueue role in every job's workspace. One audit record per batch, naming
 * its count and workspaces (never a secret).
 */
export function createBatchService(broker: Broker): ServiceImpl<typeof BatchService> {
  return {
    async enqueueJobs(req, ctx) {
      req.jobs.forEach((job, i) => {
        if (job.apiVersion === "") return;
        try {
          checkApiVersion(job.apiVersion);
        } catch (err) {
          throw new ConnectError(
            `jobs[${i}]: ${ConnectError.from(err).rawMessage} (or omit it in a batch's jobs)`,
            Code.InvalidArgument,
          );
        }
      });
      const by = principalOf(ctx).spiffeId.text;
      const target = `${req.jobs.length} jobs in ${workspacesOf(req.jobs)}`;
      const batch = await audited(
        ctx,
        "job.enqueue_batch",
        target,
        () => broker.enqueueBatch(req.jobs.map((job) => enqueueInputOf(job, by))),
        (b) => ({
          reason:
            `${b.created} of ${b.jobs.length} jobs ` +
            `queued` +
            `${b.created < b.jobs.length ? `; ${b.jobs.length - b.created} already enqueued under their idempotency keys` : ""}` +
            `${b.jobs.length ? ` (first ${String(b.jobs[0]!.id)})` : ""}`,
        }),
      );
      return { apiVersion, jobs: batch.jobs.map(jobMessage), created: batch.created };
    },
  };
}

/** The batch's workspaces for the audit record: a few by name, then how many more. */
function workspacesOf(jobs: readonly { workspaceId: string }[]): string {
  const all = [...new Set(jobs.map((j) => j.workspaceId))];
  const named = all
    .slice(0, 5)
    .map((w) => `"${w.slice(0, 140)}"`)
    .join(", ");
  return `workspace${all.length === 1 ? "" : "s"} ${named}${all.length > 5 ? ` and ${all.length - 5} more` : ""}`;
}
