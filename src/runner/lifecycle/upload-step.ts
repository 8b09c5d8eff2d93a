import { join } from "node:path";
import type { EventSink } from "../output/output.js";
import type { Settlement } from "./settle.js";
import { uploadOutput, type UploadClient } from "../output/upload-output.js";

/** What uploading a job's output needs. */
export interface JobOutputUpload {
  /** The protocol client the files go through (opened on first use). */
  readonly uploads: () => Promise<UploadClient>;
  readonly jobId: string;
  readonly leaseToken: string;
  /** The job's directory: its `output/` is what the job saw as /output. */
  readonly jobDir: string;
  /** Aborted when the lease is lost or the agent is forced to stop: nothing more is sent. */
  readonly signal: AbortSignal;
  readonly events: EventSink;
  readonly log: (message: string) => void;
}

/**
 * Uploads the job's output directory and adds the manifest to the
 * settlement. A file that is not uploaded for a reason of its own (a link,
 * a bad name) is reported in the `job.artifacts` event (sent when anything
 * was uploaded or left out) and left out of the manifest. When
 * the upload itself fails, a job that succeeded is failed (retryable): its
 * result would be incomplete otherwise. When `signal` aborts the settlement
 * is returned as it was; the caller completes nothing then.
 */
export async function withUploadedOutput(
  upload: JobOutputUpload,
  settlement: Settlement,
): Promise<Settlement> {
  const { jobId } = upload;
  try {
    const manifest = await uploadOutput({
      client: await upload.uploads(),
      jobId,
      leaseToken: upload.leaseToken,
      dir: join(upload.jobDir, "output"),
      signal: upload.signal,
    });
    // An empty output directory is the common case and says nothing: no event.
    if (manifest.artifacts.length || manifest.skipped.length) {
      upload.events.event({
        type: "job.artifacts",
        count: manifest.artifacts.length,
        skipped: manifest.skipped.length ? manifest.skipped : undefined,
      });
      upload.log(
        `job ${jobId}: uploaded ${manifest.artifacts.length} output ` +
          `file(s)${manifest.skipped.length ? `, left out ${manifest.skipped.length}` : ""}`,
      );
    }
    return manifest.artifacts.length
      ? { ...settlement, artifacts: manifest.artifacts }
      : settlement;
  } catch (err) {
    if (upload.signal.aborted) return settlement;
    const message = (err as Error).message;
    upload.log(`job ${jobId}: uploading its output failed: ${message}`);
    upload.events.event({ type: "job.artifacts_failed", message });
    if (settlement.outcome !== "succeeded") return settlement;
    return {
      ...settlement,
      outcome: "failed",
      error: {
        code: "artifact_upload_failed",
        message: `the job succeeded but its output could not be uploaded: ${message}`,
        retryable: true,
      },
    };
  }
}
