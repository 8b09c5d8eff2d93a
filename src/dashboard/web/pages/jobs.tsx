// The jobs: AdminService.ListJobs with the filters it offers (workspace, states, labels, runner,
// time, order), a page at a time; each queued job's `waiting` reason (src/broker/jobs/waiting.ts
// says it, the page only shows it). The first page reloads when a job event arrives (live.ts).
import type { Job } from "../../../../gen/forelead/runner/v1/job_pb.js";
import { admin } from "../clients.js";
import { useData } from "../data.js";
import { ErrorNote } from "../errors.js";
import { href } from "../route.js";
import { Time } from "../time.js";
import { useState } from "preact/hooks";
import { StateBadge } from "../job/state.js";
import "./pages.css";

const states = ["queued", "running", "waiting_input", "succeeded", "failed", "cancelled"] as const;
const spans = [
  { value: "", label: "any time" },
  { value: "1h", label: "last hour" },
  { value: "24h", label: "last 24 hours" },
  { value: "7d", label: "last 7 days" },
  { value: "30d", label: "last 30 days" },
];
/** The events after which a job of the list may have changed. */
const jobEvents = [
  "job.queued",
  "job.leased",
  "job.settled",
  "job.requeued",
  "job.cancel_requested",
  "job.suspended",
  "job.input_answered",
  "job.input_expired",
];

interface Filters {
  readonly workspaceId: string;
  readonly state: string;
  readonly labels: string;
  readonly runnerId: string;
  readonly since: string;
  readonly order: string;
}
const none: Filters = {
  workspaceId: "",
  state: "",
  labels: "",
  runnerId: "",
  since: "",
  order: "newest",
};

function Waiting({ job }: { job: Job }) {
  const w = job.waiting;
  if (job.state !== "queued" || !w) return null;
  return (
    <span class="waiting" data-waiting={w.code}>
      <span class="badge warn">{w.code.replace(/_/g, " ")}</span> {w.message}
    </span>
  );
}

function JobRow({ job }: { job: Job }) {
  return (
    <tr data-job={job.id} data-state={job.state}>
      <th scope="row" data-label="job">
        <a href={href("job", job.id)}>
          {job.displayName ? (
            <span class="job-name" data-job-name>
              {job.displayName}
            </span>
          ) : null}
          <code>{job.id}</code>
        </a>
      </th>
      <td data-label="state">
        <StateBadge state={job.state} cancelRequested={job.cancelRequested} />
      </td>
      <td data-label="workspace">{job.workspaceId}</td>
      <td data-label="labels">
        {job.labels.length ? (
          job.labels.map((l) => (
            <code key={l} class="label">
              {l}
            </code>
          ))
        ) : (
          <span class="muted">-</span>
        )}
      </td>
      <td data-label="runner">
        {job.runnerId ? <code>{job.runnerId}</code> : <span class="muted">-</span>}
      </td>
      <td data-label="attempts">
        {job.attempts ?? 0} / {job.maxAttempts}
      </td>
      <td data-label="created">
        <Time at={job.createdAt} />
      </td>
      <td data-label="why / how">
        {job.state === "queued" ? (
          <Waiting job={job} />
        ) : job.settledAt ? (
          <>
            settled <Time at={job.settledAt} />
          </>
        ) : null}
        {job.error?.code ? <span class="muted"> {job.error.code}</span> : null}
      </td>
    </tr>
  );
}

function FilterForm({ value, onChange }: { value: Filters; onChange: (f: Filters) => void }) {
  const [draft, setDraft] = useState(value);
  const set = (k: keyof Filters) => (e: Event) =>
    setDraft({ ...draft, [k]: (e.currentTarget as HTMLInputElement | HTMLSelectElement).value });
  return (
    <form
      class="toolbar"
      aria-label="Filters"
      onSubmit={(e) => {
        e.preventDefault();
        onChange(draft);
      }}
    >
      <label>
        workspace
        <input
          name="workspace"
          value={draft.workspaceId}
          onInput={set("workspaceId")}
          placeholder="all"
          size={12}
        />
      </label>
      <label>
        state
        <select name="state" value={draft.state} onChange={set("state")}>
          <option value="">all</option>
          {states.map((s) => (
            <option key={s} value={s}>
              {s.replace("_", " ")}
            </option>
          ))}
        </select>
      </label>
      <label>
        labels
        <input
          name="labels"
          value={draft.labels}
          onInput={set("labels")}
          placeholder="linux, gpu"
          size={12}
        />
      </label>
      <label>
        runner
        <input
          name="runner"
          value={draft.runnerId}
          onInput={set("runnerId")}
          placeholder="any"
          size={10}
        />
      </label>
      <label>
        created
        <select name="since" value={draft.since} onChange={set("since")}>
          {spans.map((s) => (
            <option key={s.value} value={s.value}>
              {s.label}
            </option>
          ))}
        </select>
      </label>
      <label>
        order
        <select name="order" value={draft.order} onChange={set("order")}>
          <option value="newest">newest first</option>
          <option value="oldest">oldest first</option>
        </select>
      </label>
      <button type="submit">Apply</button>
      <button type="button" onClick={() => (setDraft(none), onChange(none))}>
        Clear
      </button>
    </form>
  );
}

export function JobsPage() {
  const [filters, setFilters] = useState<Filters>(none);
  // The tokens of the pages before this one ("" the first): Back pops, Next pushes.
  const [tokens, setTokens] = useState<readonly string[]>([""]);
  const token = tokens[tokens.length - 1] ?? "";
  const labels = filters.labels.split(/[\s,]+/).filter(Boolean);
  const list = useData(
    async (signal) => {
      const reply = await admin.listJobs(
        {
          workspaceId: filters.workspaceId.trim(),
          state: filters.state,
          labels,
          runnerId: filters.runnerId.trim(),
          since: filters.since,
          order: filters.order,
          pageSize: 50,
          pageToken: token,
        },
        { signal },
      );
      // ListJobs leaves `waiting` out; GetJob says it (src/broker/jobs/waiting.ts): ask for the
      // queued ones of this page.
      const waiting = await Promise.all(
        reply.jobs.map(async (j) =>
          j.state === "queued"
            ? await admin.getJob({ jobId: j.id }, { signal }).then(
                (r) => r.job?.waiting,
                () => undefined,
              )
            : undefined,
        ),
      );
      return {
        ...reply,
        jobs: reply.jobs.map((j, i) => (waiting[i] ? { ...j, waiting: waiting[i] } : j)),
      };
    },
    [JSON.stringify(filters), token],
    // Later pages stay as read: a new job would shift them under the reader.
    tokens.length === 1 ? jobEvents : undefined,
  );
  const jobs = list.data?.jobs ?? [];
  return (
    <section class="jobs-page">
      <h1>Jobs</h1>
      <FilterForm value={filters} onChange={(f) => (setFilters(f), setTokens([""]))} />
      <ErrorNote error={list.error} what="jobs" />
      {list.data && jobs.length === 0 ? <p class="muted">No job matches.</p> : null}
      {jobs.length > 0 ? (
        <div class="table-wrap">
          <table class="jobs stack">
            <caption class="sr-only">
              Jobs{tokens.length > 1 ? `, page ${tokens.length}` : ""}
            </caption>
            <thead>
              <tr>
                <th scope="col">job</th>
                <th scope="col">state</th>
                <th scope="col">workspace</th>
                <th scope="col">labels</th>
                <th scope="col">runner</th>
                <th scope="col">attempts</th>
                <th scope="col">created</th>
                <th scope="col">why waiting / settled</th>
              </tr>
            </thead>
            <tbody>
              {jobs.map((j) => (
                <JobRow key={j.id} job={j} />
              ))}
            </tbody>
          </table>
        </div>
      ) : list.loading && !list.data ? (
        <p class="muted">Loading…</p>
      ) : null}
      <div class="actions pager">
        <button
          type="button"
          disabled={tokens.length === 1}
          onClick={() => setTokens(tokens.slice(0, -1))}
        >
          Previous page
        </button>
        <button
          type="button"
          disabled={!list.data?.nextPageToken}
          onClick={() => setTokens([...tokens, list.data?.nextPageToken ?? ""])}
        >
          Next page
        </button>
      </div>
    </section>
  );
}
