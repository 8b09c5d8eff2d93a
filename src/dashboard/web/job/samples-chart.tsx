// A job's resource samples (SamplesService.GetJobSamples: CPU in cores, memory in bytes, every
// attempt) as a line chart. chart.js with only the parts it draws registered (a line on two
// linear axes, tooltips, legend), coloured from the theme's custom properties. Reloaded when the
// job's events stream brings a new sample (`version`), not on a timer.
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { CategoryScale, Chart, Legend, LinearScale, LineController, LineElement, PointElement, Tooltip } from "chart.js";
import { useEffect, useRef } from "preact/hooks";
import type { GetJobSamplesResponse } from "../../../../gen/forelead/admin/v1/samples_pb.js";
import { samples } from "../clients.js";
import { useData } from "../data.js";
import { ErrorNote } from "../errors.js";

Chart.register(LineController, LineElement, PointElement, LinearScale, CategoryScale, Tooltip, Legend);

const mib = 2 ** 20;

function themeColor(name: string, fallback: string): string {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || fallback;
}

function SamplesCanvas({ data }: { data: GetJobSamplesResponse }) {
  const canvas = useRef<HTMLCanvasElement>(null);
  useEffect(() => {
    if (!canvas.current) return undefined;
    const first = data.samples[0]?.at ? timestampDate(data.samples[0].at).getTime() : 0;
    const seconds = data.samples.map((s) => (s.at ? Math.round((timestampDate(s.at).getTime() - first) / 100) / 10 : 0));
    const fg = themeColor("--fg", "#1b1f24");
    const grid = themeColor("--border", "#d1d9e0");
    const chart = new Chart(canvas.current, {
      type: "line",
      data: {
        labels: seconds.map((s) => `${s} s`),
        datasets: [
          { label: "CPU (cores)", data: data.samples.map((s) => s.cpuCores), yAxisID: "cpu", borderColor: themeColor("--accent", "#0b5cd5"), backgroundColor: themeColor("--accent", "#0b5cd5"), pointRadius: 2 },
          { label: "memory (MiB)", data: data.samples.map((s) => Number(s.memoryBytes) / mib), yAxisID: "memory", borderColor: themeColor("--ok", "#1a7f37"), backgroundColor: themeColor("--ok", "#1a7f37"), pointRadius: 2 },
        ],
      },
      options: {
        animation: false,
        maintainAspectRatio: false,
        color: fg,
        scales: {
          x: { type: "category", ticks: { color: fg }, grid: { color: grid }, title: { display: true, text: "since the first sample", color: fg } },
          cpu: { type: "linear", position: "left", beginAtZero: true, ticks: { color: fg }, grid: { color: grid }, title: { display: true, text: "cores", color: fg } },
          memory: { type: "linear", position: "right", beginAtZero: true, ticks: { color: fg }, grid: { drawOnChartArea: false }, title: { display: true, text: "MiB", color: fg } },
        },
      },
    });
    return () => chart.destroy();
  }, [data]);
  return <canvas ref={canvas} role="img" aria-label={`CPU and memory of ${data.samples.length} samples; peak ${data.peakCpuCores.toFixed(2)} cores, ${(Number(data.peakMemoryBytes) / mib).toFixed(0)} MiB`} />;
}

export function SamplesChart({ jobId, version }: { jobId: string; version: number }) {
  const s = useData((signal) => samples.getJobSamples({ jobId }, { signal }), [jobId, version]);
  return (
    <section class="card" aria-labelledby="samples-title">
      <h2 id="samples-title">Resources</h2>
      <ErrorNote error={s.error} what="samples" />
      {s.data && s.data.samples.length > 0 ? (
        <>
          <p class="small muted" data-samples={s.data.samples.length}>
            {s.data.samples.length} samples; peak {s.data.peakCpuCores.toFixed(2)} cores, {(Number(s.data.peakMemoryBytes) / mib).toFixed(0)} MiB
          </p>
          <div class="chart">
            <SamplesCanvas data={s.data} />
          </div>
        </>
      ) : s.data ? (
        <p class="muted">No resource samples (the runner sends one every few seconds while a job runs).</p>
      ) : null}
    </section>
  );
}
