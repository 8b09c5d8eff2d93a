// A job's resource samples (SamplesService.GetJobSamples: CPU in cores, memory in bytes, every
// attempt) as two line charts (chart.tsx: chart.js with registered parts only, the theme's
// colours). Reloaded when the job's events stream brings a new sample (`version`), not on a timer.
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { useEffect, useState } from "preact/hooks";
import { samples } from "../clients.js";
import { ChartView } from "../chart.js";
import { useData } from "../data.js";
import { ErrorNote } from "../errors.js";

const mib = 2 ** 20;

/** A burst of samples (the stream read from the start) reads them once, after it. */
const settleMs = 300;

export function SamplesChart({ jobId, version }: { jobId: string; version: number }) {
  const [read, setRead] = useState(version);
  useEffect(() => {
    const timer = setTimeout(() => setRead(version), settleMs);
    return () => clearTimeout(timer);
  }, [version]);
  const s = useData((signal) => samples.getJobSamples({ jobId }, { signal }), [jobId, read]);
  const list = s.data?.samples ?? [];
  const first = list[0]?.at ? timestampDate(list[0].at).getTime() : 0;
  // Seconds since the first sample, to a tenth.
  const labels = list.map(
    (x) =>
      `${x.at ? (Math.round((timestampDate(x.at).getTime() - first) / 100) / 10).toFixed(1) : "?"} s`,
  );
  const peakMiB = s.data ? (Number(s.data.peakMemoryBytes) / mib).toFixed(0) : "";
  return (
    <section class="card" aria-labelledby="samples-title">
      <h2 id="samples-title">Resources</h2>
      <ErrorNote error={s.error} what="samples" />
      {s.data && list.length > 0 ? (
        <>
          <p class="small muted" data-samples={list.length}>
            {list.length} samples; peak {s.data.peakCpuCores.toFixed(2)} cores, {peakMiB} MiB
          </p>
          <ChartView
            type="line"
            labels={labels}
            series={[{ label: "CPU (cores)", data: list.map((x) => x.cpuCores), color: "accent" }]}
            yTitle="cores"
            label={`CPU of ${list.length} samples, peak ${s.data.peakCpuCores.toFixed(2)} cores`}
          />
          <ChartView
            type="line"
            labels={labels}
            series={[
              {
                label: "memory (MiB)",
                data: list.map((x) => Number(x.memoryBytes) / mib),
                color: "ok",
              },
            ]}
            yTitle="MiB"
            label={`memory of ${list.length} samples, peak ${peakMiB} MiB`}
          />
        </>
      ) : s.data ? (
        <p class="muted">
          No resource samples (the runner sends one every few seconds while a job runs).
        </p>
      ) : null}
    </section>
  );
}
