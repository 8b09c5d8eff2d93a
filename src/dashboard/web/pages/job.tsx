// One job: its facts (AdminService.GetJob), the state timeline and attempts (timeline.ts, from the
// job, its events stream and the global stream's events about it), the log following live
// (log-view.tsx), the events its runners sent, resource samples as a chart, artifacts to
// download, and cancel. Everything updates from streams: the job's events stream (followed) and
// the global event stream (live.ts) — the job is read again only when an event about it arrives.
import { toJson } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { useEffect, useMemo, useState } from "preact/hooks";
import { admin } from "../clients.js";
import { useData } from "../data.js";
import { ErrorNote } from "../errors.js";
import { Artifacts } from "../job/artifacts.js";
import { CancelJob } from "../job/cancel.js";
import { RetryJob } from "../job/retry.js";
import { EventsList } from "../job/events-list.js";
import { FollowNote, LogView } from "../job/log-view.js";
import { ProgressBar, ResultJson } from "../job/progress.js";
import { SamplesChart } from "../job/samples-chart.js";
import { StateBadge, isActive } from "../job/state.js";
import { reduceTimeline, type FleetEvent, type RunnerEvent, type Tone } from "../job/timeline.js";
import { useFollow } from "../job/use-follow.js";
import { subscribe, type LiveEvent } from "../live.js";
import { href } from "../route.js";
import { Time, formatSeconds, toDate } from "../time.js";
import { progressEventType } from "../../../protocol/job-events.js";
import { progressFiguresOf } from "../../../protocol/progress-text.js";
import "./pages.css";

/** The global stream's events about one job. */
const jobEventTypes = [
  "job.queued",
  "job.leased",
  "job.settled",
  "job.requeued",
  "job.cancel_requested",
  "job.suspended",
  "job.input_answered",
  "job.input_expired",
];
const sampleType = "resource.sample";
const toneClass: Readonly<Record<Tone, string>> = {
  good: "ok",
  bad: "bad",
  warn: "warn",
  neutral: "",
};

interface ShownEvent extends RunnerEvent {
  readonly position: string;
}

function fleetEventOf(e: LiveEvent): FleetEvent {
  return { id: e.id, at: toDate(e.at), type: e.type, runnerId: e.runnerId, data: e.data };
}

function typeOf(e: RunnerEvent): string {
  const d = e.data;
  return d && typeof d === "object" && !Array.isArray(d) && typeof d["type"] === "string"
    ? d["type"]
    : "";
}

export function JobPage({ jobId }: { jobId: string }) {
  const job = useData((signal) => admin.getJob({ jobId }, { signal }).then((r) => r.job), [jobId]);
  const [fleetEvents, setFleetEvents] = useState<readonly FleetEvent[]>([]);
  const [events, setEvents] = useState<readonly ShownEvent[]>([]);
  const reload = job.reload;
  useEffect(() => {
    setFleetEvents([]);
    setEvents([]);
    return subscribe(jobEventTypes, (e) => {
      if (e.jobId !== jobId) return;
      setFleetEvents((l) => [...l, fleetEventOf(e)]);
      reload();
    });
  }, [jobId]);
  const eventsState = useFollow(
    (after, signal) => admin.getJobEvents({ jobId, after, follow: true }, { signal }),
    (e) => {
      const shown: ShownEvent = {
        position: e.position,
        attempt: e.attempt,
        receivedAt: toDate(e.receivedAt),
        data: e.data ? toJson(ValueSchema, e.data) : undefined,
      };
      setEvents((l) => [...l, shown]);
      // A runner's job.started/job.exited may arrive before the global stream says so.
      if (typeOf(shown) === "job.started" || typeOf(shown) === "job.exited") reload();
    },
    [jobId],
  );
  // The events stream ends when the job has settled: read it once more for its final facts.
  useEffect(() => {
    if (eventsState.kind === "ended") reload();
  }, [eventsState.kind]);
  const j = job.data;
  const timeline = useMemo(
    () =>
      j
        ? reduceTimeline(
            {
              state: j.state,
              createdAt: toDate(j.createdAt),
              settledAt: toDate(j.settledAt),
              attempts: j.attempts ?? 0,
              runnerId: j.runnerId,
              exitCode: j.exitCode,
              errorCode: j.error?.code || j.failure?.reason || undefined,
            },
            events,
            fleetEvents,
          )
        : undefined,
    [j, events, fleetEvents],
  );
  const sampleCount = events.filter((e) => typeOf(e) === sampleType).length;
  const listed = useMemo(
    () => events.filter((e) => typeOf(e) !== sampleType).map((e) => ({ ...e, type: typeOf(e) })),
    [events],
  );
  // The newest job.progress event the runner sent is shown at once; the job's stored progress
  // (the same figures, kept by the control plane) covers a page opened after the events.
  const lastProgress = listed.findLast((e) => e.type === progressEventType);
  const lastFigures = lastProgress && progressFiguresOf(lastProgress.data);
  const progress = lastFigures
    ? { figures: lastFigures, at: lastProgress.receivedAt }
    : j?.progress
      ? { figures: j.progress, at: toDate(j.progress.updatedAt) }
      : undefined;
  return (
    <section class="job-page">
      <p class="small">
        <a href={href("jobs")}>← Jobs</a>
      </p>
      <h1>
        {j?.displayName ? (
          <span class="job-name" data-job-name>
            {j.displayName}
          </span>
        ) : (
          "Job"
        )}{" "}
        <code>{jobId}</code>
      </h1>
      <ErrorNote error={job.error} what="job" />
      {j ? (
        <>
          <div class="job-head">
            <StateBadge state={j.state} cancelRequested={j.cancelRequested} />
            {isActive(j.state) ? <CancelJob job={j} onCancelled={reload} /> : <RetryJob job={j} />}
          </div>
          {j.state === "queued" && j.waiting ? (
            <p class="waiting" data-waiting={j.waiting.code}>
              <span class="badge warn">{j.waiting.code.replace(/_/g, " ")}</span>{" "}
              {j.waiting.message}
            </p>
          ) : null}
          <div class="cards">
            <section class="card" aria-labelledby="facts-title">
              <h2 id="facts-title">Job</h2>
              <dl>
                <dt>workspace</dt>
                <dd>{j.workspaceId}</dd>
                <dt>labels</dt>
                <dd>
                  {j.labels.length
                    ? j.labels.map((l) => (
                        <code key={l} class="label">
                          {l}
                        </code>
                      ))
                    : "-"}
                </dd>
                {j.fairnessKey ? (
                  <>
                    <dt>fairness key</dt>
                    <dd>
                      <code data-fairness-key>{j.fairnessKey}</code>
                    </dd>
                  </>
                ) : null}
                <dt>runner</dt>
                <dd>{j.runnerId ? <code data-runner>{j.runnerId}</code> : "-"}</dd>
                <dt>attempts</dt>
                <dd>
                  {j.attempts ?? 0} of {j.maxAttempts}
                </dd>
                <dt>command</dt>
                <dd>
                  <code>{j.spec?.argv.join(" ") || "-"}</code>
                </dd>
                <dt>created</dt>
                <dd>
                  <Time at={j.createdAt} />
                </dd>
                <dt>settled</dt>
                <dd>
                  <Time at={j.settledAt} />
                </dd>
                {j.exitCode !== undefined ? (
                  <>
                    <dt>exit code</dt>
                    <dd>{j.exitCode}</dd>
                  </>
                ) : null}
                {j.error?.code ? (
                  <>
                    <dt>error</dt>
                    <dd>
                      <code>{j.error.code}</code> {j.error.message}
                    </dd>
                  </>
                ) : null}
              </dl>
            </section>
            <section class="card" aria-labelledby="timeline-title">
              <h2 id="timeline-title">Timeline</h2>
              <ol class="timeline">
                {timeline?.steps.map((s) => (
                  <li key={s.key} data-step={s.label}>
                    <span class={`badge ${toneClass[s.tone]}`}>{s.label}</span>{" "}
                    {s.attempt !== undefined ? (
                      <span class="muted">attempt {s.attempt}</span>
                    ) : null}{" "}
                    {s.detail} <Time at={s.at} />
                  </li>
                ))}
              </ol>
            </section>
            <section class="card" aria-labelledby="attempts-title">
              <h2 id="attempts-title">Attempts</h2>
              {j && j.attemptHistory.length > 0 ? (
                <ul class="plain attempts">
                  {j.attemptHistory.map((a) => (
                    <li key={a.attempt} data-attempt={a.attempt}>
                      <strong>#{a.attempt}</strong> <code>{a.runnerId}</code>{" "}
                      {a.executor ? <span class="muted">{a.executor}</span> : null} — {a.outcome}
                      {a.exitCode !== undefined ? `, exit ${a.exitCode}` : ""}
                      {a.cancelledBy ? ` by ${a.cancelledBy}` : ""}
                      {a.endedAt ? " after" : " for"} {formatSeconds(Number(a.durationMs) / 1000)},
                      started <Time at={a.startedAt} />
                    </li>
                  ))}
                </ul>
              ) : timeline && timeline.attempts.length > 0 ? (
                <ul class="plain attempts">
                  {timeline.attempts.map((a) => (
                    <li key={a.attempt} data-attempt={a.attempt}>
                      <strong>#{a.attempt}</strong> {a.runnerId ? <code>{a.runnerId}</code> : null}{" "}
                      {a.executor ? <span class="muted">{a.executor}</span> : null} — {a.ending}
                      {a.durationMs !== undefined
                        ? ` after ${formatSeconds(a.durationMs / 1000)}`
                        : ""}
                      {a.startedAt ? (
                        <>
                          , started <Time at={a.startedAt} />
                        </>
                      ) : null}
                    </li>
                  ))}
                </ul>
              ) : (
                <p class="muted">Not started yet.</p>
              )}
            </section>
          </div>
          {progress || j.result ? (
            <section class="card" aria-labelledby="progress-title">
              <h2 id="progress-title">{j.result ? "Progress and result" : "Progress"}</h2>
              {progress ? <ProgressBar progress={progress.figures} at={progress.at} /> : null}
              {j.result ? <ResultJson result={j.result} /> : null}
            </section>
          ) : null}
          <LogView jobId={jobId} />
          <section class="card" aria-labelledby="events-title">
            <div class="card-head">
              <h2 id="events-title">Events</h2>
              <FollowNote state={eventsState} what="events" />
            </div>
            <EventsList events={listed} />
          </section>
          <div class="cards">
            <SamplesChart jobId={jobId} version={sampleCount} />
            <Artifacts jobId={jobId} settled={!isActive(j.state)} />
          </div>
        </>
      ) : job.loading ? (
        <p class="muted">Loading…</p>
      ) : null}
    </section>
  );
}
