// Retry (a failed or cancelled job) or Re-run (a succeeded one): PipelineService.RetryJob after a
// confirmation, then the new job's page. Offered only when the control plane says the person may
// retry this job now (GetJobActions: its enqueuer or an admin, settled, not retried yet), so a
// read-only person sees no button; a refusal meanwhile is shown as the control plane sent it.
import { useState } from "preact/hooks";
import type { Job } from "../../../../gen/forelead/runner/v1/job_pb.js";
import { pipelines } from "../clients.js";
import { ConfirmButton } from "../confirm.js";
import { useData } from "../data.js";
import { ErrorNote } from "../errors.js";
import { href } from "../route.js";

export function RetryJob({ job }: { job: Job }) {
  const [error, setError] = useState<unknown>(undefined);
  const actions = useData(
    (signal) => pipelines.getJobActions({ jobId: job.id }, { signal }),
    [job.id, job.state, job.retriedBy],
  );
  if (!actions.data?.retry) return null;
  const label = job.state === "succeeded" ? "Re-run" : "Retry";
  return (
    <div class="retry">
      <ConfirmButton
        label={label}
        title={`${label} job ${job.id}?`}
        body={
          "A new job is enqueued with this job's spec, labels, code and limits, linked to this " +
          "one; this job stays as it is."
        }
        onConfirm={async () => {
          const reply = await pipelines.retryJob({ apiVersion: "v1", jobId: job.id });
          location.hash = href("job", reply.job?.id ?? job.id);
        }}
        onError={setError}
        onDone={() => setError(undefined)}
      />
      <ErrorNote error={error} what="retry refused" />
    </div>
  );
}
