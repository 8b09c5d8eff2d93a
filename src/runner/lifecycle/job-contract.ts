import type { Lease } from "../../../gen/forelead/runner/v1/job_pb.js";
import { parseDirective, type Progress } from "../../protocol/job-directives.js";
import { droppedEventType, progressEventType } from "../../protocol/job-events.js";
import { progressText } from "../../protocol/progress-text.js";
import { invalidResultCode, type JobResult } from "../../protocol/job-result.js";
import type { JobOutput } from "../output/output.js";
import type { SecretMasker } from "../output/secret-masker.js";
import { followJobEvents } from "./job-events-file.js";
import { writeJobInput } from "./job-input.js";
import { readResultFile } from "./job-result.js";
import type { Settlement } from "./settle.js";
import { inputRequestOf } from "./suspend-step.js";
import type { InputRequestSpec } from "../../protocol/input-request.js";

/**
 * Least time between two job.progress events of one job; the last changed progress is always sent.
 */
const progressIntervalMs = 1000;

/**
 * Most dropped lines of a job's events file reported one by one; the rest are counted in one last
 * report.
 */
const maxDropReports = 10;

/** What opening a job's contract needs. */
export interface JobContractOptions {
  readonly jobDir: string;
  readonly lease: Lease;
  readonly runnerId: string;
  readonly executor: string;
  /** The job's output (its events masked). */
  readonly out: JobOutput;
  readonly masker: SecretMasker;
  readonly log: (message: string) => void;
}

/** The job's side of the contract for one run (docs/job-contract.md). */
export interface JobContract {
  /** The job has started and its job.started event is sent: the events file is read from now on. */
  started(): void;
  /** A line of the job's stdout (masked): a directive acts; every line stays in the log. */
  stdout(text: string): void;
  /** The job has ended: the rest of its events file is read and its last progress sent. */
  ended(): Promise<void>;
  /**
   * The last `::forelead::input` directive's request, its rules checked (a failed settlement naming
   * the problem); undefined when there was none.
   */
  inputRequest(): InputRequestSpec | Settlement | undefined;
  /**
   * The settlement with the job's result and its error line; an invalid result.json fails a
   * succeeded job.
   */
  settle(settlement: Settlement): Promise<Settlement>;
}

/**
 * Opens the job's side of the contract before it starts: writes
 * input/execution.json (job-input.ts), makes and follows the events file
 * (job-events-file.ts), and returns what the run calls as the job goes on.
 * Progress directives become job.progress events only when the value
 * changes, at most one each progressIntervalMs; the last one is held back no
 * longer than that and is sent when the job ends. A job printing the same
 * value again sends nothing.
 */
export async function openJobContract(o: JobContractOptions): Promise<JobContract> {
  const jobId = o.lease.job!.id;
  await writeJobInput(o.jobDir, o.lease, o.runnerId, o.executor);
  let dropped = 0;
  const events = await followJobEvents(o.jobDir, {
    event: (event) => o.out.event(event),
    dropped: (line, problem) => {
      if (++dropped > maxDropReports) return;
      o.log(`job ${jobId}: ${problem}; the line is dropped`);
      o.out.event({ type: droppedEventType, line, reason: problem });
    },
  });

  let lineResult: JobResult | undefined;
  let errorMessage: string | undefined;
  let lineInput: Readonly<Record<string, unknown>> | undefined;
  let lastSentAt = -Infinity;
  let lastSent = "";
  let pending: Progress | undefined;
  let timer: NodeJS.Timeout | undefined;
  const sendProgress = () => {
    clearTimeout(timer);
    timer = undefined;
    if (!pending) return;
    o.out.event({ type: progressEventType, ...pending });
    lastSent = progressText(pending);
    pending = undefined;
    lastSentAt = performance.now();
  };

  return {
    started: () => events.start(),
    stdout(text) {
      const directive = parseDirective(text);
      if (!directive) return;
      if (directive.name === "result") lineResult = directive.result;
      else if (directive.name === "error") errorMessage = directive.message;
      else if (directive.name === "input") lineInput = directive.request;
      else if (progressText(directive.progress) === lastSent) {
        // Back to the value last sent: nothing changed, and nothing held back is sent.
        pending = undefined;
        clearTimeout(timer);
        timer = undefined;
      } else {
        pending = directive.progress;
        const wait = lastSentAt + progressIntervalMs - performance.now();
        if (wait <= 0) sendProgress();
        else timer ??= setTimeout(sendProgress, wait);
      }
    },
    async ended() {
      sendProgress();
      await events.stop();
      if (dropped > maxDropReports) {
        o.log(
          `job ${jobId}: ${dropped - maxDropReports} more lines of the events file were dropped`,
        );
        o.out.event({
          type: droppedEventType,
          count: dropped - maxDropReports,
          reason: `${dropped - maxDropReports} more lines were dropped`,
        });
      }
    },
    inputRequest: () =>
      lineInput &&
      inputRequestOf(lineInput, (message): Settlement => ({
        outcome: "failed",
        error: {
          code: "invalid_input_request",
          message: `the job's ::forelead::input directive ${message}`,
          retryable: false,
        },
      })),
    async settle(settlement) {
      const file = await readResultFile(o.jobDir);
      if (file.kind === "invalid") {
        o.log(`job ${jobId}: its result is invalid: ${file.problem}`);
        // A job that failed already keeps its own failure; the invalid file is in the runner's log.
        if (settlement.outcome === "succeeded") {
          return {
            ...settlement,
            outcome: "failed",
            error: {
              code: invalidResultCode,
              message: `the job's result is invalid: ${file.problem}`,
              retryable: false,
            },
          };
        }
      }
      // result.json wins over a result line: the file is the deliberate, larger channel.
      const result = file.kind === "result" ? file.result : lineResult;
      const error =
        settlement.error &&
        errorMessage &&
        (settlement.error.code === "exit_code" || settlement.error.code === "killed")
          ? { ...settlement.error, message: errorMessage }
          : settlement.error;
      return {
        ...settlement,
        error,
        result: result ? o.masker.value(result) : settlement.result,
      };
    },
  };
}
