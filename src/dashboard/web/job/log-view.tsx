// A job's log, following live: AdminService.GetJobLogs with follow, resumed after a dropped
// connection from the last entry's position (follow.ts), lines built per stream (log-lines.ts)
// and their ANSI colours shown as segments (ansi.ts) — text children only, never HTML. A search
// keeps the lines holding its text, marked; Download saves the whole log as text, as
// `forelead jobs logs` prints it.
import { toJson } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { Fragment, type ComponentChild } from "preact";
import { useLayoutEffect, useMemo, useRef, useState } from "preact/hooks";
import { logEntryText } from "../../../protocol/log-text.js";
import { admin } from "../clients.js";
import { ErrorNote } from "../errors.js";
import type { AnsiSegment } from "./ansi.js";
import { createLogLines, type LogLine } from "./log-lines.js";
import { useFollow, type Followed } from "./use-follow.js";

/** Entries a page of the log download reads. */
const downloadPage = 1000;

/** The whole log as text, page by page, each entry as `forelead jobs logs` prints it. */
async function downloadLog(jobId: string): Promise<void> {
  const parts: string[] = [];
  let after = "";
  for (let n = downloadPage; n === downloadPage;) {
    n = 0;
    for await (const e of admin.getJobLogs({ jobId, after, pageSize: downloadPage })) {
      n++;
      after = e.position;
      parts.push(logEntryText(e.data ? toJson(ValueSchema, e.data) : null));
    }
  }
  const url = URL.createObjectURL(new Blob(parts, { type: "text/plain;charset=utf-8" }));
  const link = document.createElement("a");
  link.href = url;
  link.download = `job-${jobId}.log`;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

/** `text` cut where `query` occurs (case-insensitive): the matches marked. */
function marked(text: string, query: string) {
  if (!query) return text;
  const out: ComponentChild[] = [];
  const lower = text.toLowerCase();
  let from = 0;
  for (let at = lower.indexOf(query, from); at !== -1; at = lower.indexOf(query, from)) {
    if (at > from) out.push(text.slice(from, at));
    out.push(<mark key={at}>{text.slice(at, at + query.length)}</mark>);
    from = at + query.length;
  }
  if (from < text.length) out.push(text.slice(from));
  return out;
}

function Segment({ s, query }: { s: AnsiSegment; query: string }) {
  const cls = s.classes.length ? s.classes.join(" ") : undefined;
  const style = Object.keys(s.style).length ? s.style : undefined;
  if (s.href) {
    return (
      <a href={s.href} class={cls} style={style} rel="noreferrer noopener" target="_blank">
        {marked(s.text, query)}
      </a>
    );
  }
  return cls || style ? (
    <span class={cls} style={style}>
      {marked(s.text, query)}
    </span>
  ) : (
    <>{marked(s.text, query)}</>
  );
}

function Line({ line, query }: { line: LogLine; query: string }) {
  return (
    <div class={`log-line ${line.stream}`} data-attempt={line.attempt}>
      {line.segments.map((s, i) => (
        <Segment key={i} s={s} query={query} />
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
  const [search, setSearch] = useState("");
  const [downloadError, setDownloadError] = useState<unknown>(undefined);
  const query = search.toLowerCase();
  const all = model.lines();
  const lines = query ? all.filter((l) => l.text.toLowerCase().includes(query)) : all;
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
      <div class="toolbar log-tools">
        <label>
          search
          <input
            type="search"
            name="log-search"
            value={search}
            onInput={(e) => setSearch(e.currentTarget.value)}
            placeholder="text in a line"
            size={24}
          />
        </label>
        {query ? (
          <span class="small muted" role="status" data-log-matches={lines.length}>
            {lines.length} of {all.length} lines
          </span>
        ) : null}
        <button
          type="button"
          data-log-download
          onClick={() =>
            downloadLog(jobId).then(
              () => setDownloadError(undefined),
              (err: unknown) => setDownloadError(err),
            )
          }
        >
          Download log
        </button>
      </div>
      <ErrorNote error={downloadError} what="log download" />
      {all.length === 0 ? (
        <p class="muted">{state.kind === "ended" ? "The job wrote no log." : "No log yet."}</p>
      ) : lines.length === 0 ? (
        <p class="muted">No line holds “{search}”.</p>
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
              <Line line={l} query={query} />
            </Fragment>
          ))}
        </div>
      )}
    </section>
  );
}
