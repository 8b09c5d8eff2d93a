// Cancel with a confirmation: a modal <dialog> (focus moves into it, Escape closes it) saying what
// cancelling does; AdminService.CancelJob on confirm. A refusal (the identity lacks the enqueue
// role, the job settled meanwhile) is shown as the control plane sent it.
import { useRef, useState } from "preact/hooks";
import type { Job } from "../../../../gen/forelead/runner/v1/job_pb.js";
import { admin } from "../clients.js";
import { ErrorNote } from "../errors.js";

export function CancelJob({ job, onCancelled }: { job: Job; onCancelled: () => void }) {
  const dialog = useRef<HTMLDialogElement>(null);
  const [error, setError] = useState<unknown>(undefined);
  const [busy, setBusy] = useState(false);
  const confirm = async () => {
    setBusy(true);
    try {
      // apiVersion: the version of the API every write request names.
      await admin.cancelJob({ apiVersion: "v1", jobId: job.id });
      setError(undefined);
      onCancelled();
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
      dialog.current?.close();
    }
  };
  const what = job.state === "running" ? `It is running on ${job.runnerId || "a runner"}: the runner stops it and it settles as cancelled.` : "It has not started: it settles as cancelled at once.";
  return (
    <div class="cancel">
      <button type="button" class="danger" disabled={job.cancelRequested} onClick={() => (setError(undefined), dialog.current?.showModal())}>
        {job.cancelRequested ? "Cancel requested" : "Cancel job…"}
      </button>
      <ErrorNote error={error} what="cancel refused" />
      <dialog ref={dialog} aria-labelledby="cancel-title" class="confirm">
        <h2 id="cancel-title">Cancel job {job.id}?</h2>
        <p>{what}</p>
        <div class="actions">
          <button type="button" class="danger" disabled={busy} onClick={() => void confirm()}>
            Cancel the job
          </button>
          <button type="button" autofocus onClick={() => dialog.current?.close()}>
            Keep it
          </button>
        </div>
      </dialog>
    </div>
  );
}
