/** One line a job wrote, or a line the runner adds about the job ("runner"). */
export interface LogLine {
  readonly stream: "stdout" | "stderr" | "runner";
  readonly text: string;
}

/** A job event: `type` is job.started, job.exited, job.timeout, job.cancelled, ... */
export interface JobEvent {
  readonly type: string;
  readonly [field: string]: unknown;
}

/** Where a job's log lines go, in the order they were written. */
interface LogSink {
  log(line: LogLine): void;
}

/** Where a job's events go, in order. */
export interface EventSink {
  event(event: JobEvent): void;
}

/** The output of one lease of one job. */
export interface JobOutput extends LogSink, EventSink {
  /**
   * Resolves once what was written so far has been delivered (or given up on); call before
   * completing.
   */
  flush(): Promise<void>;
  /** The lease is gone: drop anything not yet sent and send nothing more. */
  abandon(): void;
}

/**
 * The lease a job's output is sent under. The token is for the wire only: never written into a line
 * or event.
 */
interface OutputLease {
  readonly jobId: string;
  readonly leaseToken: string;
}

/** Opens the output of each lease the agent runs. */
export interface OutputSink {
  open(lease: OutputLease): JobOutput;
}
