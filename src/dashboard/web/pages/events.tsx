// The global event stream, live (FleetService.StreamEvents through live.ts: one stream per page
// load, resumed after a dropped connection): every event since the page opened, newest first,
// narrowed by workspace and kind. Links lead to the job of a job event.
import { useEffect, useState } from "preact/hooks";
import { subscribe, type LiveEvent } from "../live.js";
import { href } from "../route.js";
import { Time } from "../time.js";
import "./pages.css";

/** How many events the page keeps (older ones drop off the end). */
const keep = 500;
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
  const [events, setEvents] = useState<readonly LiveEvent[]>([]);
  const [workspace, setWorkspace] = useState("");
  const [kind, setKind] = useState("");
  useEffect(() => subscribe([], (e) => setEvents((l) => [e, ...l].slice(0, keep))), []);
  const shown = events.filter(
    (e) =>
      (!workspace.trim() || e.workspaceId === workspace.trim()) &&
      (!kind || e.type.startsWith(`${kind}.`)),
  );
  return (
    <section class="events-page">
      <h1>Events</h1>
      <p class="muted small">
        The control plane's events as they happen, newest first (the last {keep} since this page
        opened).
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
        <button type="button" disabled={events.length === 0} onClick={() => setEvents([])}>
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
