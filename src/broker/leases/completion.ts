import { Code, ConnectError } from "@connectrpc/connect";
import { resultProblem } from "../../protocol/job-result.js";
import { checkJobId, checkLeaseToken, hashLeaseToken } from "../ids.js";
import type { LeaseCall } from "./views.js";

/** Runner-reported outcomes. */
const outcomes = ["succeeded", "failed", "cancelled"] as const;
type Outcome = (typeof outcomes)[number];

/** A completion, as the runner sent it. */
export interface CompletionInput extends LeaseCall {
  readonly completionId: string;
  readonly outcome: string;
  readonly exitCode: number | undefined;
  readonly error:
    { readonly code: string; readonly message: string; readonly retryable: boolean } | undefined;
  /**
   * The result manifest, already checked by src/artifacts (manifest.ts):
   * digests finalized under this job's leases. Recorded when the job settles.
   */
  readonly artifacts?: readonly ResultArtifact[];
  /** The job's result object (docs/job-contract.md); checked against src/protocol/job-result.ts. */
  readonly result?: { readonly [key: string]: unknown } | undefined;
}

/** One entry of a completion's result manifest. */
interface ResultArtifact {
  readonly name: string;
  readonly digest: string;
  readonly size: number;
  readonly mediaType: string;
}

/** A completion after its checks: what the statements need. */
export interface CheckedCompletion {
  readonly jobId: string;
  readonly tokenHash: Buffer;
  readonly outcome: Outcome;
  readonly error:
    { readonly code: string; readonly message: string; readonly retryable: boolean } | undefined;
  /** The result manifest as stored JSON, or null when there is none. */
  readonly artifacts: string | null;
  /** The result as stored JSON, or null when there is none. */
  readonly result: string | null;
  /** Identifies the body, so a repeat with a different body is told apart. */
  readonly completionSha256: string;
}

/**
 * Checks a completion's fields (400 naming the bad one); shared by completeJob and completeBatch.
 */
export function checkCompletion(input: CompletionInput): CheckedCompletion {
  const jobId = checkJobId(input.jobId);
  const tokenHash = checkLeaseToken(input.leaseToken);
  if (!input.completionId)
    throw new ConnectError(
      "completionId is required: an id the runner picks, so a retried completion is recognised",
      Code.InvalidArgument,
    );
  if (input.completionId.length > 200)
    throw new ConnectError("completionId is longer than 200 characters", Code.InvalidArgument);
  if (!outcomes.includes(input.outcome as Outcome)) {
    throw new ConnectError(
      `outcome ${JSON.stringify(input.outcome)} is not one of ${outcomes.join(", ")}`,
      Code.InvalidArgument,
    );
  }
  const outcome = input.outcome as Outcome;
  const error =
    input.error && (input.error.code || input.error.message)
      ? {
          code: input.error.code,
          message: input.error.message.slice(0, 4096),
          retryable: input.error.retryable,
        }
      : undefined;
  const artifacts = input.artifacts?.length
    ? JSON.stringify(
        input.artifacts.map((a) => ({
          name: a.name,
          digest: a.digest,
          size: a.size,
          mediaType: a.mediaType,
        })),
      )
    : null;
  const result = input.result ? JSON.stringify(input.result) : null;
  if (result !== null) {
    const problem = resultProblem(input.result, Buffer.byteLength(result, "utf8"));
    if (problem) throw new ConnectError(`result ${problem}`, Code.InvalidArgument);
  }
  // The result joins the hash only when present, so completions without one hash as before.
  const completionSha256 = hashLeaseToken(
    JSON.stringify([
      outcome,
      input.exitCode ?? null,
      error ?? null,
      ...(artifacts || result ? [artifacts] : []),
      ...(result ? [result] : []),
    ]),
  ).toString("hex");
  return { jobId, tokenHash, outcome, error, artifacts, result, completionSha256 };
}
