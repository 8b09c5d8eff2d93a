// Cancel with a confirmation (confirm.tsx: a modal dialog, Escape keeps the job) saying what
// cancelling does; AdminService.CancelJob on confirm. A refusal (the identity lacks the enqueue
// role, the job settled meanwhile) is shown as the control plane sent it.
import { useState } from "preact/hooks";
import type { Job } from "../../../../gen/forelead/runner/v1/job_pb.js";
import { admin } from "../clients.js";
import { ConfirmButton } from "../confirm.js";
import { ErrorNote } from "../errors.js";

export function CancelJob({ job, onCancelled }: { job: Job; onCancelled: () => void }) {
  const [error, setError] = useState<unknown>(undefined);
  if (job.cancelRequested) return <span class="muted">cancel requested</span>;
  const body =
    job.state === "running"
      ? `It is running on ${job.runnerId || "a runner"}: the runner stops it and it settles as cancelled.`
      : "It has not started: it settles as cancelled at once.";
  return (
    <div class="cancel">
      <ConfirmButton
        label="Cancel job"
        title={`Cancel job ${job.id}?`}
        body={body}
        danger
        // apiVersion: the version of the API every write request names.
        onConfirm={() => admin.cancelJob({ apiVersion: "v1", jobId: job.id })}
        onError={setError}
        onDone={() => (setError(undefined), onCancelled())}
      />
      <ErrorNote error={error} what="cancel refused" />
    </div>
  );
}
