// A job's log, following live: AdminService.GetJobLogs with follow, resumed after a dropped
// connection from the last entry's position (follow.ts), lines built per stream (log-lines.ts)
// and their ANSI colours shown as segments (ansi.ts) — text children only, never HTML.
import { toJson } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { Fragment } from "preact";
import { useLayoutEffect, useMemo, useRef, useState } from "preact/hooks";
import { admin } from "../clients.js";
import { ErrorNote } from "../errors.js";
import type { AnsiSegment } from "./ansi.js";
import { createLogLines, type LogLine } from "./log-lines.js";
import { useFollow, type Followed } from "./use-follow.js";

function Segment({ s }: { s: AnsiSegment }) {
  const cls = s.classes.length ? s.classes.join(" ") : undefined;
  const style = Object.keys(s.style).length ? s.style : undefined;
  if (s.href) {
    return (
      <a href={s.href} class={cls} style={style} rel="noreferrer noopener" target="_blank">
        {s.text}
      </a>
    );
  }
  return cls || style ? (
    <span class={cls} style={style}>
      {s.text}
    </span>
  ) : (
    <>{s.text}</>
  );
}

function Line({ line }: { line: LogLine }) {
  return (
    <div class={`log-line ${line.stream}`} data-attempt={line.attempt}>
      {line.segments.map((s, i) => (
        <Segment key={i} s={s} />
      ))}
      {"\n"}
    </div>
  );
}

/** The follower's state in words. */
export function FollowNote({ state, what }: { state: Followed; what: string }) {
  switch (state.kind) {
    case "connecting":
      return <span class="follow muted">connecting…</span>;
    case "live":
      return <span class="follow follow-live">following</span>;
    case "reconnecting":
      return (
        <span class="follow follow-reconnecting">
          connection lost; reconnecting (try {state.attempt})
        </span>
      );
    case "ended":
      return <span class="follow muted">complete: the job has settled</span>;
    case "failed":
      return <ErrorNote error={state.error} what={what} />;
    default:
      return null;
  }
}

export function LogView({ jobId }: { jobId: string }) {
  const model = useMemo(() => createLogLines(), [jobId]);
  const [, setVersion] = useState(0);
  const box = useRef<HTMLDivElement>(null);
  const pinned = useRef(true);
  const state = useFollow(
    (after, signal) => admin.getJobLogs({ jobId, after, follow: true }, { signal }),
    (entry) => {
      model.push({
        attempt: entry.attempt,
        data: entry.data ? toJson(ValueSchema, entry.data) : undefined,
      });
      setVersion((v) => v + 1);
    },
    [jobId],
  );
  const lines = model.lines();
  // Keep the newest line in view while the reader stays at the bottom.
  useLayoutEffect(() => {
    const el = box.current;
    if (el && pinned.current) el.scrollTop = el.scrollHeight;
  });
  const attempts = new Set(lines.map((l) => l.attempt));
  return (
    <section class="card log-card" aria-labelledby="log-title">
      <div class="card-head">
        <h2 id="log-title">Log</h2>
        <FollowNote state={state} what="log" />
      </div>
      {lines.length === 0 ? (
        <p class="muted">{state.kind === "ended" ? "The job wrote no log." : "No log yet."}</p>
      ) : (
        <div
          ref={box}
          class="log"
          role="log"
          aria-label={`log of job ${jobId}`}
          tabIndex={0}
          onScroll={(e) => {
            const el = e.currentTarget;
            pinned.current = el.scrollHeight - el.scrollTop - el.clientHeight < 24;
          }}
        >
          {lines.map((l, i) => (
            <Fragment key={l.key}>
              {attempts.size > 1 && (i === 0 || lines[i - 1]?.attempt !== l.attempt) ? (
                <div class="log-attempt">attempt {l.attempt}</div>
              ) : null}
              <Line line={l} />
            </Fragment>
          ))}
        </div>
      )}
    </section>
  );
}
