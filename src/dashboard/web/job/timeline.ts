import type { JsonObject, JsonValue } from "@bufbuild/protobuf";

/**
 * A job's state timeline and attempts, reduced from what is known of it: the job itself
 * (created, settled), the events its runners sent on its stream (job.started, job.exited,
 * job.timeout, job.cancelled, …; docs/streams.md) and the global stream's events about it
 * (job.leased, job.requeued, job.cancel_requested, job.settled; docs/fleet.md) as they
 * arrive. Each fact appears once, in time order.
 */

export interface JobFacts {
  readonly state: string;
  readonly createdAt?: Date | undefined;
  readonly settledAt?: Date | undefined;
  readonly attempts: number;
  readonly runnerId: string;
  readonly exitCode?: number | undefined;
  readonly errorCode?: string | undefined;
}

/** One entry of the job's events stream. */
export interface RunnerEvent {
  readonly attempt: number;
  readonly receivedAt?: Date | undefined;
  readonly data: JsonValue | undefined;
}

/** One global event about this job. */
export interface FleetEvent {
  readonly id: bigint;
  readonly at?: Date | undefined;
  readonly type: string;
  readonly runnerId: string;
  readonly data: JsonObject | undefined;
}

export type Tone = "neutral" | "good" | "bad" | "warn";

interface TimelineStep {
  readonly key: string;
  readonly at: Date | undefined;
  readonly label: string;
  readonly attempt?: number | undefined;
  readonly detail: string;
  readonly tone: Tone;
}

interface AttemptSummary {
  readonly attempt: number;
  runnerId: string;
  executor: string;
  startedAt?: Date | undefined;
  exitedAt?: Date | undefined;
  /**
   * "exit 0", "signal SIGTERM", "timed out after 30 s", "cancelled", "requeued (lease_lost)",
   * "running".
   */
  ending: string;
  durationMs?: number | undefined;
}

export interface Timeline {
  readonly steps: readonly TimelineStep[];
  readonly attempts: readonly AttemptSummary[];
}

const settledStates = new Set(["succeeded", "failed", "cancelled"]);

function obj(v: JsonValue | undefined): JsonObject {
  return v && typeof v === "object" && !Array.isArray(v) ? v : {};
}
const str = (v: JsonValue | undefined): string => (typeof v === "string" ? v : "");
const num = (v: JsonValue | undefined): number | undefined =>
  typeof v === "number" ? v : undefined;

function outcomeTone(outcome: string): Tone {
  return outcome === "succeeded"
    ? "good"
    : outcome === "failed"
      ? "bad"
      : outcome === "cancelled"
        ? "warn"
        : "neutral";
}

/** exit facts of a job.exited event, as a person reads them. */
function exitText(data: JsonObject): string {
  const code = num(data["exitCode"]);
  if (code !== undefined) return `exit ${code}`;
  const signal = str(data["signal"]);
  return signal ? `signal ${signal}` : "exited";
}

export function reduceTimeline(
  job: JobFacts,
  runnerEvents: readonly RunnerEvent[],
  fleetEvents: readonly FleetEvent[],
): Timeline {
  const steps: TimelineStep[] = [];
  const attempts = new Map<number, AttemptSummary>();
  const attempt = (n: number): AttemptSummary => {
    let a = attempts.get(n);
    if (!a) attempts.set(n, (a = { attempt: n, runnerId: "", executor: "", ending: "running" }));
    return a;
  };
  const seenFleet = new Set<string>();
  // Who asked for the cancel (job.cancel_requested's `by`): the runner only carries it out.
  let cancelledBy = "";
  for (const e of fleetEvents) {
    const data = e.data ?? {};
    const n = num(data["attempt"]);
    seenFleet.add(e.type);
    switch (e.type) {
      case "job.queued":
        steps.push({ key: `f${e.id}`, at: e.at, label: "queued", detail: "", tone: "neutral" });
        break;
      case "job.leased":
        if (n !== undefined) attempt(n).runnerId = e.runnerId;
        steps.push({
          key: `f${e.id}`,
          at: e.at,
          label: "leased",
          attempt: n,
          detail: e.runnerId ? `to ${e.runnerId}` : "",
          tone: "neutral",
        });
        break;
      case "job.requeued": {
        const why = str(data["why"]);
        if (n !== undefined) attempt(n).ending = `requeued (${why || "released"})`;
        steps.push({
          key: `f${e.id}`,
          at: e.at,
          label: "requeued",
          attempt: n,
          detail: why,
          tone: "warn",
        });
        break;
      }
      case "job.cancel_requested":
        cancelledBy = str(data["by"]);
        steps.push({
          key: `f${e.id}`,
          at: e.at,
          label: "cancel requested",
          detail: [
            cancelledBy && `by ${cancelledBy}`,
            str(data["state"]) && `while ${str(data["state"])}`,
          ]
            .filter(Boolean)
            .join(" "),
          tone: "warn",
        });
        break;
      case "job.settled": {
        const outcome = str(data["outcome"]);
        const code = str(data["errorCode"]);
        steps.push({
          key: `f${e.id}`,
          at: e.at,
          label: outcome || "settled",
          attempt: n,
          detail: code && code !== outcome ? code : "",
          tone: outcomeTone(outcome),
        });
        break;
      }
      default:
        steps.push({
          key: `f${e.id}`,
          at: e.at,
          label: e.type.replace(/^job\./, ""),
          attempt: n,
          detail: "",
          tone: "neutral",
        });
    }
  }

  runnerEvents.forEach((e, i) => {
    const data = obj(e.data);
    const type = str(data["type"]);
    const key = `r${i}`;
    const a = attempt(e.attempt);
    switch (type) {
      case "job.started":
        a.executor = str(data["executor"]);
        a.startedAt = e.receivedAt;
        if (a.ending === "running" || a.ending === "") a.ending = "running";
        steps.push({
          key,
          at: e.receivedAt,
          label: "started",
          attempt: e.attempt,
          detail: a.executor ? `${a.executor} executor` : "",
          tone: "neutral",
        });
        break;
      case "job.exited": {
        a.exitedAt = e.receivedAt;
        a.durationMs = num(data["durationMs"]);
        if (a.ending === "running") a.ending = exitText(data);
        const code = num(data["exitCode"]);
        steps.push({
          key,
          at: e.receivedAt,
          label: "exited",
          attempt: e.attempt,
          detail: exitText(data),
          tone: code === 0 ? "good" : "bad",
        });
        break;
      }
      case "job.timeout": {
        const s = num(data["timeoutSeconds"]);
        a.ending = s !== undefined ? `timed out after ${s} s` : "timed out";
        steps.push({
          key,
          at: e.receivedAt,
          label: "timed out",
          attempt: e.attempt,
          detail: s !== undefined ? `after ${s} s` : "",
          tone: "bad",
        });
        break;
      }
      case "job.cancelled":
        a.ending = "cancelled";
        steps.push({
          key,
          at: e.receivedAt,
          label: cancelledBy ? `cancelled by ${cancelledBy}` : "cancelled",
          attempt: e.attempt,
          detail: "the runner stopped the job",
          tone: "warn",
        });
        break;
      default:
        // Samples are the chart's, progress is the job's; the job's own events show in the events
        // list.
        break;
    }
  });

  // What the job says of itself, where no event of the global stream said it already.
  if (!seenFleet.has("job.queued") && job.createdAt)
    steps.push({
      key: "job-created",
      at: job.createdAt,
      label: "queued",
      detail: "",
      tone: "neutral",
    });
  if (!seenFleet.has("job.settled") && settledStates.has(job.state)) {
    const detail =
      job.errorCode && job.errorCode !== job.state
        ? job.errorCode
        : job.exitCode !== undefined
          ? `exit ${job.exitCode}`
          : "";
    steps.push({
      key: "job-settled",
      at: job.settledAt,
      label: job.state,
      detail,
      tone: outcomeTone(job.state),
    });
  }
  if (job.attempts > 0 && job.runnerId) {
    const last = attempt(job.attempts);
    if (!last.runnerId) last.runnerId = job.runnerId;
  }
  if (settledStates.has(job.state))
    for (const a of attempts.values()) if (a.ending === "running") a.ending = job.state;

  const time = (s: TimelineStep) => s.at?.getTime() ?? Number.POSITIVE_INFINITY;
  // A stable sort: equal times keep the order above (the global stream's, then the runner's).
  const ordered = steps
    .map((s, i) => ({ s, i }))
    .sort((x, y) => time(x.s) - time(y.s) || x.i - y.i)
    .map((x) => x.s);
  return { steps: ordered, attempts: [...attempts.values()].sort((x, y) => x.attempt - y.attempt) };
}
