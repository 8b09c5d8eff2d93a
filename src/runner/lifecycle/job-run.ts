import { randomUUID } from "node:crypto";
import { mkdir, rm } from "node:fs/promises";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { JobSpecSchema, type Lease } from "../../../gen/forelead/runner/v1/job_pb.js";
import { CheckoutError, needsCheckout, type CheckoutStep } from "../checkout/checkout-step.js";
import { leaseExpiryMs, RunnerApiError, type RunnerClient } from "../transport/client.js";
import { keepIdTokenFiles, type IdTokenFiles } from "./id-tokens.js";
import type { ServerClock } from "./clock.js";
import type { ExecutionResult, Executor, RunnerCapacity } from "../executors/executor.js";
import { withUploadedOutput } from "./upload-step.js";
import { keepLease } from "./lease-keeper.js";
import type { JobOutput, OutputSink } from "../output/output.js";
import {
  createSecretMasker,
  leaseSecretValues,
  maskedForms,
  type SecretMasker,
} from "../output/secret-masker.js";
import { forEachLine } from "../executors/lines.js";
import { jobSecretsProblem } from "../executors/secret-files.js";
import { createLeaseRun, type StopReason } from "./run-state.js";
import { defaultSampleIntervalMs, startResourceSamples } from "./resource-samples.js";
import { settle, type NextLease, type Settlement } from "./settle.js";
import { openJobContract } from "./job-contract.js";
import type { UploadClient } from "../output/upload-output.js";
import {
  restoreInput,
  suspendIfAsked,
  type SuspendClient,
  type SuspendStep,
} from "./suspend-step.js";
import { fetchInputs, InputError, type InputClient } from "./input-step.js";

/** What running a lease needs from the agent. */
export interface JobRunContext {
  readonly client: RunnerClient;
  readonly executor: Executor;
  readonly output: OutputSink;
  readonly clock: ServerClock;
  readonly capacity: RunnerCapacity;
  /** Job directories are made under here and removed afterwards. */
  readonly jobsDir: string;
  /** TERM-to-KILL grace for cancel, timeout and forced shutdown. */
  readonly graceMs: number;
  /**
   * How often a running job's CPU and memory are sent as resource.sample events; 5 s by default, 0
   * for never.
   */
  readonly sampleIntervalMs?: number;
  readonly checkout?: CheckoutStep;
  /**
   * Where the job's output directory is uploaded before completing; without it, output files are
   * not kept.
   */
  readonly uploads?: () => Promise<UploadClient>;
  /** The suspend routes (docs/suspend.md); without them a job that asks for input fails. */
  readonly suspends?: () => Promise<SuspendClient>;
  /**
   * Where a pipeline step's inputs are downloaded from; without it, a job with inputs is refused as
   * incompatible.
   */
  readonly inputs?: () => Promise<InputClient>;
  readonly log: (message: string) => void;
  /** Aborted when the agent is forced to stop: completion retries end. */
  readonly abort: AbortSignal;
  /** The completion asks for the runner's next lease (settle.ts). */
  readonly next?: NextLease;
}

/** One lease being run. */
export interface JobRun {
  readonly jobId: string;
  /**
   * Resolves when the job is settled, released or abandoned, and its directory is gone: true when
   * the control plane took its completion.
   */
  readonly done: Promise<boolean>;
  /**
   * Shutdown: stop the job (TERM, KILL after the grace) and release the lease instead of
   * completing.
   */
  release(): void;
  /** The runner's watch said the job was cancelled: stopped as a renewal's cancel stops it. */
  cancelRequested(): void;
  /** True once the job's cancel is known (from a renewal or the watch). */
  readonly cancelSeen: boolean;
}

/**
 * Runs one lease end to end: keep the lease, check the spec, check out,
 * execute, watch the timeout and cancellation, stream output, settle. The
 * run moves through the phases of RunState (run-state.ts); a lost lease
 * ends it wherever it is. Everything sent or logged about the job (its
 * output, events, the completion's error, the operator log) passes the
 * lease's secret masker (secret-masker.ts).
 */
export function runLease(context: JobRunContext, lease: Lease): JobRun {
  const job = lease.job!;
  const jobId = job.id;
  const token = lease.token;
  const spec = job.spec ?? create(JobSpecSchema);
  const run = createLeaseRun();
  const masker = createSecretMasker(leaseSecretValues(lease));
  const secrets = { env: lease.secrets, files: lease.secretFiles };
  const ctx: JobRunContext = { ...context, log: (message) => context.log(masker.text(message)) };

  const keeper = keepLease({
    client: ctx.client,
    clock: ctx.clock,
    jobId,
    leaseToken: token,
    expiresAtMs: leaseExpiryMs(lease),
    log: ctx.log,
    onCancelRequested: () => {
      if (!run.stop("cancel", ctx.graceMs)) return;
      ctx.log(`job ${jobId}: cancel requested; stopping it`);
      const state = run.state;
      if (state.phase === "starting" || state.phase === "running")
        state.output.event({ type: "job.cancelled" });
    },
    onLost: (why) => {
      // After the job ended, a refused renewal only means the completion is not sent.
      if (run.lose(why) === "settling") return;
      ctx.log(`job ${jobId}: lease lost (${why}); killing the job, it will not be completed`);
    },
  });

  const suspendStep = (jobDir: string): SuspendStep => ({
    suspends: ctx.suspends,
    uploads: ctx.uploads,
    jobId,
    leaseToken: token,
    jobDir,
    signal: AbortSignal.any([run.lostSignal, ctx.abort]),
    log: ctx.log,
  });

  const execute = async (jobDir: string): Promise<Settlement | undefined> => {
    const why =
      ctx.executor.incompatibility(spec, ctx.capacity) ??
      kindIncompatibility(job.kind, ctx.checkout) ??
      (lease.inputs.length && !ctx.inputs
        ? "it has pipeline inputs and this runner has no inputs client"
        : undefined);
    if (why)
      return {
        outcome: "failed",
        error: {
          code: "incompatible_spec",
          message: `this runner cannot run job ${jobId}: ${why}`,
          retryable: false,
        },
      };
    const badSecrets = jobSecretsProblem(secrets);
    if (badSecrets)
      return {
        outcome: "failed",
        error: {
          code: "invalid_secrets",
          message: `this runner cannot give job ${jobId} its secrets: ${badSecrets}`,
          retryable: false,
        },
      };
    if (lease.cancelRequested) return { outcome: "cancelled" };
    await mkdir(jobDir, { recursive: true });
    const hasWorkspace = needsCheckout(job.kind);
    if (hasWorkspace) {
      try {
        await ctx.checkout!.checkout(lease, token, join(jobDir, "workspace"), ctx.abort);
      } catch (err) {
        if (err instanceof CheckoutError)
          return {
            outcome: "failed",
            error: { code: err.code, message: err.message, retryable: err.retryable },
          };
        throw err;
      }
    }
    await restoreInput(suspendStep(jobDir), lease);
    if (lease.inputs.length) {
      try {
        await fetchInputs(
          await ctx.inputs!(),
          { jobId, leaseToken: token },
          lease.inputs,
          jobDir,
          AbortSignal.any([run.lostSignal, ctx.abort]),
        );
      } catch (err) {
        if (err instanceof InputError)
          return {
            outcome: "failed",
            error: { code: err.code, message: err.message, retryable: err.retryable },
          };
        throw err;
      }
    }
    const out = run.starting(() =>
      maskedOutput(ctx.output.open({ jobId, leaseToken: token }), masker),
    );
    if (!out) return undefined; // stopped or lost during the checkout: nothing starts
    // The job's files and lines (docs/job-contract.md): input/execution.json, the events file,
    // directives, result.json.
    const contract = await openJobContract({
      jobDir,
      lease,
      runnerId: ctx.client.runnerId,
      executor: ctx.executor.kind,
      out,
      masker,
      log: ctx.log,
    });
    let idTokens: IdTokenFiles | undefined;
    if (job.idTokenAudiences.length) {
      try {
        idTokens = await keepIdTokenFiles({
          client: ctx.client,
          clock: ctx.clock,
          jobId,
          leaseToken: token,
          audiences: job.idTokenAudiences,
          jobDir,
          socket: ctx.executor.kind === "process",
          mask: (t) => masker.add(maskedForms(t)),
          log: ctx.log,
        });
      } catch (err) {
        await contract.ended();
        if (!(err instanceof RunnerApiError) || err.status >= 500) throw err;
        return {
          outcome: "failed",
          error: {
            code: "id_token_refused",
            message: `the control plane refused job ${jobId} its ID token: ${err.message}`,
            retryable: false,
          },
        };
      }
    }
    const running = await ctx.executor
      .start({
        runnerId: ctx.client.runnerId,
        workspaceId: ctx.client.workspaceId,
        jobId,
        spec,
        jobDir,
        hasWorkspace,
        readOutput: (stream, from) =>
          forEachLine(
            from,
            (text) => {
              out.log({ stream, text });
              if (stream === "stdout") contract.stdout(text);
            },
            masker.stream(),
          ),
        secrets,
        idTokenDir: idTokens?.dir,
        idTokenSocket: idTokens?.socket,
      })
      .catch(async (err) => {
        await idTokens?.remove();
        await contract.ended();
        throw err;
      });
    out.event({ type: "job.started", executor: ctx.executor.kind });
    contract.started();
    ctx.log(`job ${jobId}: started (${ctx.executor.kind} executor)`);
    run.running(running, ctx.graceMs);
    const samples = startResourceSamples(
      running.sampler,
      ctx.sampleIntervalMs ?? defaultSampleIntervalMs,
      out,
      ctx.clock,
    );
    const timeout =
      spec.timeoutSeconds > 0
        ? setTimeout(() => {
            if (!run.stop("timeout", ctx.graceMs)) return;
            ctx.log(`job ${jobId}: over its ${spec.timeoutSeconds}s timeout; stopping it`);
            out.event({ type: "job.timeout", timeoutSeconds: spec.timeoutSeconds });
          }, spec.timeoutSeconds * 1000)
        : undefined;
    const result = await running.done.finally(() => {
      samples.stop();
      return idTokens?.remove();
    });
    clearTimeout(timeout);
    await contract.ended();
    out.event({ type: "job.exited", ...exitFacts(result) });
    const state = run.state;
    const stopping = "stopping" in state ? state.stopping : undefined;
    const ended = settlementOf(result, stopping, spec.timeoutSeconds, spec.argv[0] ?? "");
    // Exit 0 with output/input-request.json written or an input directive printed: the job is
    // suspended, not completed (docs/suspend.md).
    const asked =
      ended.outcome === "succeeded" && !stopping && state.phase !== "lost"
        ? await suspendIfAsked(
            suspendStep(jobDir),
            out,
            () => keeper.stop(),
            contract.inputRequest(),
          )
        : undefined;
    if (asked) return asked.settlement;
    const settlement = stopping || state.phase === "lost" ? ended : await contract.settle(ended);
    // A cancelled, lost or released job keeps nothing; a timed-out one keeps what it wrote.
    if (!ctx.uploads || state.phase === "lost" || (stopping && stopping !== "timeout"))
      return settlement;
    const signal = AbortSignal.any([run.lostSignal, ctx.abort]);
    return withUploadedOutput(
      { uploads: ctx.uploads, jobId, leaseToken: token, jobDir, signal, events: out, log: ctx.log },
      settlement,
    );
  };

  const done = (async (): Promise<boolean> => {
    const jobDir = join(ctx.jobsDir, `${jobId}-${randomUUID().slice(0, 8)}`);
    try {
      let settlement: Settlement | undefined;
      try {
        settlement = await execute(jobDir);
      } catch (err) {
        ctx.log(`job ${jobId}: the runner could not run it: ${(err as Error).message}`);
        settlement = {
          outcome: "failed",
          error: {
            code: "runner_error",
            message: `the runner could not run the job: ${(err as Error).message}`,
            retryable: true,
          },
        };
      }
      const ended = run.ended();
      if (!ended) return false; // lost: never completed
      if (ended.phase === "releasing") {
        keeper.stop();
        await ended.output?.flush();
        await ctx.client.release(jobId, token).then(
          () => ctx.log(`job ${jobId}: lease released`),
          (err) =>
            ctx.log(
              `job ${jobId}: release failed (${(err as Error).message}); the lease will expire`,
            ),
        );
        return false;
      }
      if (!settlement) return false;
      await ended.output?.flush();
      if (run.state.phase === "lost") return false; // lost while the output was flushed
      return await settle(
        ctx,
        jobId,
        token,
        settlement.error
          ? {
              ...settlement,
              error: { ...settlement.error, message: masker.text(settlement.error.message) },
            }
          : settlement,
      );
    } finally {
      keeper.stop();
      const state = run.state;
      if ("output" in state) state.output?.abandon();
      await rm(jobDir, { recursive: true, force: true }).catch((err) =>
        ctx.log(`job ${jobId}: could not remove ${jobDir}: ${err.message}`),
      );
    }
  })();

  return {
    jobId,
    done,
    release: () => void run.stop("release", ctx.graceMs),
    cancelRequested: () => keeper.cancelRequested(),
    get cancelSeen() {
      return keeper.cancelSeen;
    },
  };
}

/**
 * The job's output with its events masked. Its log lines are not masked
 * again: readOutput's stream masker saw them whole, before they were cut
 * into lines.
 */
function maskedOutput(out: JobOutput, masker: SecretMasker): JobOutput {
  return {
    log: (line) => out.log(line),
    event: (event) => out.event(masker.value(event)),
    flush: () => out.flush(),
    abandon: () => out.abandon(),
  };
}

function kindIncompatibility(kind: string, checkout: CheckoutStep | undefined): string | undefined {
  if (kind === "command" || kind === "") return undefined;
  if (!needsCheckout(kind)) return `job kind ${JSON.stringify(kind)} is unknown to this runner`;
  return checkout ? undefined : `it is a ${kind} job and this runner has no checkout step`;
}

function exitFacts(r: ExecutionResult): Record<string, unknown> {
  return {
    exitCode: r.exitCode,
    signal: r.signal || undefined,
    durationMs: r.durationMs,
    peakMemoryBytes: r.peakMemoryBytes,
  };
}

/** The settling rules: how an execution result becomes a completion. */
export function settlementOf(
  result: ExecutionResult,
  reason: StopReason | undefined,
  timeoutSeconds: number,
  command: string,
): Settlement {
  if (reason === "cancel") return { outcome: "cancelled" };
  if (reason === "timeout") {
    return {
      outcome: "failed",
      error: {
        code: "timeout",
        message: `the job ran over its timeout of ${timeoutSeconds}s and was killed`,
        retryable: false,
      },
    };
  }
  if (result.error) return { outcome: "failed", exitCode: result.exitCode, error: result.error };
  if (result.exitCode === 0) return { outcome: "succeeded", exitCode: 0 };
  if (result.exitCode !== undefined) {
    return {
      outcome: "failed",
      exitCode: result.exitCode,
      error: {
        code: "exit_code",
        message: `${command} exited ${result.exitCode}`,
        retryable: false,
      },
    };
  }
  return {
    outcome: "failed",
    error: {
      code: "killed",
      message: `${command} was killed by ${result.signal ?? "a signal"}`,
      retryable: false,
    },
  };
}
