// One pipeline (PipelineService.GetPipeline): its facts and its step graph, a column per depth
// (pipeline/layers.ts), each step a card with its state, what it needs and a link to its job's
// page. Read again when a pipeline or job event arrives (live.ts).
import type { PipelineStep } from "../../../../gen/forelead/admin/v1/pipelines_pb.js";
import { pipelines } from "../clients.js";
import { useData } from "../data.js";
import { ErrorNote } from "../errors.js";
import { StateBadge } from "../job/state.js";
import { layersOf } from "../pipeline/layers.js";
import { href } from "../route.js";
import { Time } from "../time.js";
import { pipelineEvents } from "./pipelines.js";
import "./pages.css";

function StepCard({ step }: { step: PipelineStep }) {
  return (
    <li class="step" data-step={step.name} data-state={step.state}>
      <div class="step-head">
        {step.jobId ? (
          <a href={href("job", step.jobId)} data-step-job={step.jobId}>
            {step.displayName || step.name}
          </a>
        ) : (
          <span>{step.displayName || step.name}</span>
        )}
        <StateBadge state={step.state} />
      </div>
      {step.displayName ? <code class="muted">{step.name}</code> : null}
      {step.needs.length ? (
        <div class="step-needs" data-needs={step.needs.join(" ")}>
          needs {step.needs.join(", ")}
        </div>
      ) : null}
      {step.attempts > 1 ? <div class="muted">{step.attempts} jobs</div> : null}
      {step.allowFailure ? <div class="muted">may fail</div> : null}
    </li>
  );
}

export function PipelinePage({ pipelineId }: { pipelineId: string }) {
  const got = useData(
    (signal) => pipelines.getPipeline({ pipelineId }, { signal }),
    [pipelineId],
    pipelineEvents,
  );
  const p = got.data?.pipeline;
  return (
    <section class="pipeline-page">
      <h1>
        Pipeline {p?.name ? <span class="job-name">{p.name}</span> : null} <code>{pipelineId}</code>
      </h1>
      <p>
        <a href={href("pipelines")}>All pipelines</a>
      </p>
      <ErrorNote error={got.error} what="pipeline" />
      {p ? (
        <>
          <dl>
            <dt>state</dt>
            <dd>
              <StateBadge state={p.state} cancelRequested={p.cancelRequested} />
            </dd>
            <dt>workspace</dt>
            <dd>{p.workspaceId}</dd>
            <dt>created</dt>
            <dd>
              <Time at={p.createdAt} />
            </dd>
            <dt>settled</dt>
            <dd>
              <Time at={p.settledAt} />
            </dd>
          </dl>
          <h2>Steps</h2>
          <div class="step-graph" aria-label="Step graph, a column per depth">
            {layersOf(p.steps).map((layer, depth) => (
              <ol key={depth} class="step-layer" data-depth={depth}>
                {layer.map((s) => (
                  <StepCard key={s.name} step={s} />
                ))}
              </ol>
            ))}
          </div>
        </>
      ) : got.loading ? (
        <p class="muted">Loading…</p>
      ) : null}
    </section>
  );
}
