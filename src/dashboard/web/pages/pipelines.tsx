// The pipelines: PipelineService.ListPipelines, newest first, a page at a time (state, workspace,
// steps, created, settled). The first page reloads when a pipeline or job event arrives (live.ts).
import type { Pipeline } from "../../../../gen/forelead/admin/v1/pipelines_pb.js";
import { pipelines } from "../clients.js";
import { useData } from "../data.js";
import { ErrorNote } from "../errors.js";
import { StateBadge } from "../job/state.js";
import { href } from "../route.js";
import { Time } from "../time.js";
import { useState } from "preact/hooks";
import "./pages.css";

/** The events after which a pipeline (or one of its steps' jobs) may have changed. */
export const pipelineEvents = [
  "pipeline.queued",
  "pipeline.settled",
  "job.queued",
  "job.leased",
  "job.settled",
  "job.requeued",
];

function PipelineRow({ pipeline: p }: { pipeline: Pipeline }) {
  const done = p.steps.filter((s) => s.state === "succeeded").length;
  return (
    <tr data-pipeline={p.id} data-state={p.state}>
      <th scope="row" data-label="pipeline">
        <a href={href("pipeline", p.id)}>
          {p.name ? <span class="job-name">{p.name}</span> : null}
          <code>{p.id}</code>
        </a>
      </th>
      <td data-label="state">
        <StateBadge state={p.state} cancelRequested={p.cancelRequested} />
      </td>
      <td data-label="workspace">{p.workspaceId}</td>
      <td data-label="steps">
        {done} / {p.steps.length} succeeded
      </td>
      <td data-label="created">
        <Time at={p.createdAt} />
      </td>
      <td data-label="settled">
        <Time at={p.settledAt} />
      </td>
    </tr>
  );
}

export function PipelinesPage() {
  const [workspaceId, setWorkspaceId] = useState("");
  const [draft, setDraft] = useState("");
  // The tokens of the pages before this one ("" the first): Back pops, Next pushes.
  const [tokens, setTokens] = useState<readonly string[]>([""]);
  const token = tokens[tokens.length - 1] ?? "";
  const list = useData(
    (signal) =>
      pipelines.listPipelines({ workspaceId, pageSize: 50, pageToken: token }, { signal }),
    [workspaceId, token],
    // Later pages stay as read: a new pipeline would shift them under the reader.
    tokens.length === 1 ? pipelineEvents : undefined,
  );
  const rows = list.data?.pipelines ?? [];
  return (
    <section class="pipelines-page">
      <h1>Pipelines</h1>
      <form
        class="toolbar"
        aria-label="Filters"
        onSubmit={(e) => {
          e.preventDefault();
          setWorkspaceId(draft.trim());
          setTokens([""]);
        }}
      >
        <label>
          workspace
          <input
            name="workspace"
            value={draft}
            onInput={(e) => setDraft(e.currentTarget.value)}
            placeholder="all"
            size={12}
          />
        </label>
        <button type="submit">Apply</button>
      </form>
      <ErrorNote error={list.error} what="pipelines" />
      {list.data && rows.length === 0 ? <p class="muted">No pipeline matches.</p> : null}
      {rows.length > 0 ? (
        <div class="table-wrap">
          <table class="pipelines stack">
            <caption class="sr-only">
              Pipelines{tokens.length > 1 ? `, page ${tokens.length}` : ""}
            </caption>
            <thead>
              <tr>
                <th scope="col">pipeline</th>
                <th scope="col">state</th>
                <th scope="col">workspace</th>
                <th scope="col">steps</th>
                <th scope="col">created</th>
                <th scope="col">settled</th>
              </tr>
            </thead>
            <tbody>
              {rows.map((p) => (
                <PipelineRow key={p.id} pipeline={p} />
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
