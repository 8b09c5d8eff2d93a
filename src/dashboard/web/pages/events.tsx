// The global event stream, live (FleetService.StreamEvents through live.ts: one stream per page
// load, resumed after a dropped connection): it opens with the recent history live.ts read and
// adds every event as it happens, newest first, narrowed by workspace and kind. Links lead to the
// job of a job event.
import { useEffect, useState } from "preact/hooks";
import { onLiveState, recentEvents, recentKept, subscribe, type LiveEvent } from "../live.js";
import { href } from "../route.js";
import { Time } from "../time.js";
import "./pages.css";

const kinds = ["job", "runner", "workspace", "pipeline", "step"] as const;

function tone(e: LiveEvent): string {
  if (e.type === "job.settled") {
    const o = e.data?.["outcome"];
    return o === "succeeded" ? "ok" : o === "failed" ? "bad" : "warn";
  }
  if (
    e.type.endsWith("paused") ||
    e.type.endsWith("retired") ||
    e.type.endsWith("lease_lost") ||
    e.type === "job.requeued"
  )
    return "warn";
  return "";
}

function EventRow({ e }: { e: LiveEvent }) {
  const data = e.data ? JSON.stringify(e.data) : "";
  return (
    <tr data-event={String(e.id)} data-type={e.type}>
      <td data-label="at">
        <Time at={e.at} />
      </td>
      <td data-label="type">
        <span class={`badge ${tone(e)}`}>{e.type}</span>
      </td>
      <td data-label="workspace">{e.workspaceId || <span class="muted">-</span>}</td>
      <td data-label="runner">
        {e.runnerId ? <code>{e.runnerId}</code> : <span class="muted">-</span>}
      </td>
      <td data-label="job">
        {e.jobId ? (
          <a href={href("job", e.jobId)}>
            <code>{e.jobId}</code>
          </a>
        ) : (
          <span class="muted">-</span>
        )}
      </td>
      <td data-label="data">
        <code class="small">{data === "{}" ? "" : data}</code>
      </td>
    </tr>
  );
}

export function EventsPage() {
  // Drawn from live.ts's recent events; a new event or the end of the first catch-up redraws.
  const [, setVersion] = useState(0);
  const [clearedAfter, setClearedAfter] = useState(-1n);
  const [workspace, setWorkspace] = useState("");
  const [kind, setKind] = useState("");
  useEffect(() => {
    const redraw = () => setVersion((v) => v + 1);
    const unsubscribe = subscribe([], redraw);
    const unwatch = onLiveState(redraw);
    return () => (unsubscribe(), unwatch());
  }, []);
  const events = recentEvents()
    .filter((e) => e.id > clearedAfter)
    .toReversed();
  const shown = events.filter(
    (e) =>
      (!workspace.trim() || e.workspaceId === workspace.trim()) &&
      (!kind || e.type.startsWith(`${kind}.`)),
  );
  return (
    <section class="events-page">
      <h1>Events</h1>
      <p class="muted small">
        The control plane's events, newest first: the last {recentKept}, from its recent history on,
        adding each as it happens.
      </p>
      <form class="toolbar" aria-label="Filters" onSubmit={(e) => e.preventDefault()}>
        <label>
          workspace
          <input
            name="workspace"
            value={workspace}
            onInput={(e) => setWorkspace(e.currentTarget.value)}
            placeholder="all"
            size={12}
          />
        </label>
        <label>
          kind
          <select name="kind" value={kind} onChange={(e) => setKind(e.currentTarget.value)}>
            <option value="">all</option>
            {kinds.map((k) => (
              <option key={k} value={k}>
                {k}
              </option>
            ))}
          </select>
        </label>
        <button
          type="button"
          disabled={events.length === 0}
          onClick={() => setClearedAfter(events[0]?.id ?? clearedAfter)}
        >
          Clear
        </button>
      </form>
      {shown.length === 0 ? (
        <p class="muted" role="status">
          Waiting for events…
        </p>
      ) : (
        <div class="table-wrap">
          <table class="events stack">
            <thead>
              <tr>
                <th scope="col">at</th>
                <th scope="col">type</th>
                <th scope="col">workspace</th>
                <th scope="col">runner</th>
                <th scope="col">job</th>
                <th scope="col">data</th>
              </tr>
            </thead>
            <tbody>
              {shown.map((e) => (
                <EventRow key={String(e.id)} e={e} />
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}
