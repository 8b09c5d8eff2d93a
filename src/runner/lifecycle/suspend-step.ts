import { createHash } from "node:crypto";
import { constants as fsConstants } from "node:fs";
import { lstat, mkdir, open, readFile, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { Code, ConnectError, type Client } from "@connectrpc/connect";
import type { JsonObject } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import type { Lease } from "../../../gen/forelead/runner/v1/job_pb.js";
import type { SuspendService } from "../../../gen/forelead/runner/v1/suspend_pb.js";
import { artifactNameProblem } from "../../artifacts/names.js";
import { encodeJson } from "../../protocol/json/codec.js";
import {
  checkInputRequest,
  inputPaths,
  inputRequestLimits,
  InputRuleError,
  type InputRequestSpec,
} from "../../protocol/input-request.js";
import type { JobOutput } from "../output/output.js";
import { uploadOutput, type UploadClient } from "../output/upload-output.js";
import type { Settlement } from "./settle.js";

// Suspend and answer on the runner's side (docs/suspend.md). A job asks for input by writing
// output/input-request.json (/output in a container), or printing `::forelead::input {json}` on
// stdout, and exiting 0; what it wants to keep goes under output/checkpoint/. The runner uploads
// the checkpoint, suspends the job under its lease and completes nothing. The lease that resumes
// the job carries the answer and the checkpoint list: before the job starts again they are written
// to input/answer.json and input/checkpoint/ (/input in a container).

/** The suspend routes the runner calls; a generated SuspendService client has them. */
export type SuspendClient = Pick<Client<typeof SuspendService>, "suspend" | "checkpoint">;

/** What the suspend step needs of the lease's run. */
export interface SuspendStep {
  /**
   * The suspend routes (opened on first use); without them a request is refused and the job fails.
   */
  readonly suspends?: () => Promise<SuspendClient>;
  readonly uploads?: () => Promise<UploadClient>;
  readonly jobId: string;
  readonly leaseToken: string;
  readonly jobDir: string;
  /** Aborted when the lease is lost or the agent is forced to stop. */
  readonly signal: AbortSignal;
  readonly log: (message: string) => void;
}

const apiVersion = "v1";

/**
 * Writes a resumed job's input: input/answer.json (the answer as JSON) and
 * each checkpoint file under input/checkpoint/, its bytes checked against
 * the digest and size the lease lists. Nothing for a lease that resumes no
 * suspension. Throws naming the file when one cannot be restored.
 */
export async function restoreInput(step: SuspendStep, lease: Lease): Promise<void> {
  if (!lease.inputRequestId) return;
  const inputDir = join(step.jobDir, "input");
  await mkdir(inputDir, { recursive: true, mode: 0o755 });
  const answer = lease.inputAnswer ? encodeJson(ValueSchema, lease.inputAnswer) : null;
  await writeFile(join(inputDir, inputPaths.answer), `${JSON.stringify(answer)}\n`, {
    mode: 0o644,
    flag: "wx",
  });
  if (lease.checkpoint.length === 0) return;
  if (!step.suspends)
    throw new Error(
      "the lease resumes a suspended job with a checkpoint, and this runner has no suspend client to fetch it",
    );
  const client = await step.suspends();
  for (const file of lease.checkpoint) {
    const problem = artifactNameProblem(file.name);
    if (problem)
      throw new Error(`checkpoint file ${JSON.stringify(file.name)}: the name ${problem}`);
    const path = join(inputDir, inputPaths.checkpointDir, file.name);
    await mkdir(dirname(path), { recursive: true, mode: 0o755 });
    const out = await open(
      path,
      fsConstants.O_WRONLY | fsConstants.O_CREAT | fsConstants.O_EXCL | fsConstants.O_NOFOLLOW,
      0o644,
    );
    const hash = createHash("sha256");
    let size = 0;
    try {
      for await (const chunk of client.checkpoint(
        { apiVersion, jobId: step.jobId, leaseToken: step.leaseToken, name: file.name },
        { signal: step.signal },
      )) {
        hash.update(chunk.data);
        size += chunk.data.length;
        await out.write(chunk.data);
      }
    } finally {
      await out.close();
    }
    const digest = `sha256:${hash.digest("hex")}`;
    if (digest !== file.digest || BigInt(size) !== file.size) {
      throw new Error(
        `checkpoint file ${JSON.stringify(file.name)} arrived as ${size} bytes ` +
          `hashing to ${digest}; the lease lists ${file.size} bytes, ${file.digest}`,
      );
    }
  }
  step.log(
    `job ${step.jobId}: resumed with the answer to input request ` +
      `${JSON.stringify(lease.inputRequestId)} and ${lease.checkpoint.length} ` +
      `checkpoint file(s)`,
  );
}

/**
 * The job's input request, read from output/input-request.json: undefined
 * when the job wrote none, a failed settlement naming the problem when it is
 * not a regular file, too big, not JSON or breaks a rule of
 * src/protocol/input-request.ts.
 */
async function readInputRequest(
  jobDir: string,
): Promise<InputRequestSpec | Settlement | undefined> {
  const path = join(jobDir, "output", inputPaths.request);
  const invalid = (message: string): Settlement => ({
    outcome: "failed",
    error: {
      code: "invalid_input_request",
      message: `the job's ${inputPaths.request} ${message}`,
      retryable: false,
    },
  });
  let stat;
  try {
    stat = await lstat(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw err;
  }
  if (!stat.isFile()) return invalid("is not a regular file (a symbolic link is never followed)");
  if (stat.size > inputRequestLimits.maxRequestFileBytes)
    return invalid(
      `is ${stat.size} bytes; at most ${inputRequestLimits.maxRequestFileBytes} are read`,
    );
  let parsed: unknown;
  try {
    parsed = JSON.parse(
      await readFile(path, {
        encoding: "utf8",
        flag: fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW,
      }),
    );
  } catch (err) {
    return invalid(`is not JSON: ${(err as Error).message}`);
  }
  return inputRequestOf(parsed, invalid);
}

/**
 * An input request from its JSON (the file, or the `::forelead::input {...}`
 * directive once that is parsed): the request, or `invalid(problem)`.
 */
export function inputRequestOf<T>(
  value: unknown,
  invalid: (message: string) => T,
): InputRequestSpec | T {
  if (typeof value !== "object" || value === null || Array.isArray(value))
    return invalid("must be a JSON object {id, prompt, schema, expiresInSeconds}");
  const v = value as Record<string, unknown>;
  if (typeof v.id !== "string") return invalid("needs id, a string");
  if (typeof v.prompt !== "string") return invalid("needs prompt, a string");
  if (typeof v.expiresInSeconds !== "number")
    return invalid("needs expiresInSeconds, a number of seconds");
  const request: InputRequestSpec = {
    id: v.id,
    prompt: v.prompt,
    schema: v.schema as Record<string, unknown>,
    expiresInSeconds: v.expiresInSeconds,
  };
  try {
    checkInputRequest(request);
  } catch (err) {
    if (err instanceof InputRuleError) return invalid(err.message);
    throw err;
  }
  return request;
}

/**
 * Suspends the job when it asked for input: uploads output/checkpoint/,
 * flushes the attempt's output (nothing can be sent under the lease after
 * it), and calls suspend, retrying what may pass later. Returns "suspended"
 * (nothing to complete), "lost" (the lease ended first: nothing to
 * complete either), or the settlement of a job whose request was refused.
 */
async function suspendJob(
  step: SuspendStep,
  request: InputRequestSpec,
  out: JobOutput,
  stopRenewing: () => void,
): Promise<"suspended" | "lost" | Settlement> {
  const refused = (message: string): Settlement => ({
    outcome: "failed",
    error: { code: "suspend_refused", message, retryable: false },
  });
  if (!step.suspends || !step.uploads)
    return refused(
      `the job asked for input (request ${JSON.stringify(request.id)}), and this runner cannot suspend jobs`,
    );
  const manifest = await uploadOutput({
    client: await step.uploads(),
    jobId: step.jobId,
    leaseToken: step.leaseToken,
    dir: join(step.jobDir, "output", inputPaths.checkpointDir),
    signal: step.signal,
  });
  out.event({
    type: "job.suspending",
    requestId: request.id,
    checkpointFiles: manifest.artifacts.length,
    skipped: manifest.skipped.length ? manifest.skipped : undefined,
  });
  await out.flush();
  stopRenewing();
  const client = await step.suspends();
  const body = {
    apiVersion,
    jobId: step.jobId,
    leaseToken: step.leaseToken,
    checkpoint: manifest.artifacts,
    inputRequest: {
      id: request.id,
      prompt: request.prompt,
      schema: request.schema as JsonObject,
      expiresInSeconds: request.expiresInSeconds,
    },
  };
  for (let attempt = 1; ; attempt++) {
    try {
      const reply = await client.suspend(body, { signal: step.signal });
      step.log(
        `job ${step.jobId}: suspended for input request ` +
          `${JSON.stringify(request.id)} with ${manifest.artifacts.length} ` +
          `checkpoint file(s); the job is ${reply.job?.state ?? "?"}`,
      );
      return "suspended";
    } catch (err) {
      const code = err instanceof ConnectError ? err.code : Code.Unavailable;
      if (code === Code.Aborted || code === Code.NotFound) {
        step.log(
          `job ${step.jobId}: the suspend was refused, the lease is gone: ${(err as Error).message}`,
        );
        return "lost";
      }
      if (
        code === Code.InvalidArgument ||
        code === Code.FailedPrecondition ||
        code === Code.PermissionDenied ||
        code === Code.Unimplemented ||
        attempt >= 6 ||
        step.signal.aborted
      ) {
        return refused(`the control plane refused to suspend the job: ${(err as Error).message}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 250 * 2 ** attempt));
    }
  }
}

/**
 * After a job exited 0: when it asked for input, suspends it (see
 * suspendJob) and returns what is left to complete, `{}` for nothing;
 * undefined when it asked for nothing, and the run settles as usual. The
 * request is output/input-request.json when the job wrote it (the file
 * wins, as result.json wins over a result line: an invalid file fails the
 * job even with a valid directive), else `asked`: the last
 * `::forelead::input` directive, read with inputRequestOf.
 */
export async function suspendIfAsked(
  step: SuspendStep,
  out: JobOutput,
  stopRenewing: () => void,
  asked?: InputRequestSpec | Settlement,
): Promise<{ readonly settlement?: Settlement } | undefined> {
  const request = (await readInputRequest(step.jobDir)) ?? asked;
  if (!request) return undefined;
  if ("outcome" in request) return { settlement: request };
  const suspended = await suspendJob(step, request, out, stopRenewing);
  return typeof suspended === "string" ? {} : { settlement: suspended };
}
