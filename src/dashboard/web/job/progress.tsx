// How far a job says it is, as a bar with its figures (src/protocol/progress-text.ts, the rule
// the CLI shows too), and the result JSON it reported — text children only, never HTML.
import type { JsonObject } from "@bufbuild/protobuf";
import {
  progressPercent,
  progressText,
  type ProgressFigures,
} from "../../../protocol/progress-text.js";
import { Time } from "../time.js";

export function ProgressBar({ progress, at }: { progress: ProgressFigures; at: Date | undefined }) {
  const percent = progressPercent(progress);
  const text = progressText(progress);
  return (
    <div class="job-progress" data-progress={text}>
      {percent !== undefined ? (
        <progress max={100} value={percent} aria-label={`progress ${text}`} />
      ) : null}{" "}
      <span>{text}</span>{" "}
      {at ? (
        <span class="muted small">
          reported <Time at={at} />
        </span>
      ) : null}
    </div>
  );
}

export function ResultJson({ result }: { result: JsonObject }) {
  return (
    <pre class="result-json" data-result aria-label="result JSON">
      {JSON.stringify(result, null, 2)}
    </pre>
  );
}
