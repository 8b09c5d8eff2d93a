// <ChartView>: a chart.js chart on a canvas, in the theme's colours. Only the parts the pages use are
// registered (bar and line charts on category and linear scales, with legend and tooltip), so the
// bundle carries no other controller, element, scale or plugin; and chart.js is a chunk of its own
// (scripts/build.ts splits), loaded when the first chart draws: the pages' numbers and tables do
// not wait for it.
import { useEffect, useRef } from "preact/hooks";
import type { Chart, ChartData } from "chart.js";
import { themeChanged, themeColor } from "./theme.js";

let chartJs: Promise<typeof Chart> | undefined;

/** chart.js with the parts the pages use registered; loaded once. */
function loadChart(): Promise<typeof Chart> {
  chartJs ??= import("./chart-parts.js").then((c) => c.Chart);
  return chartJs;
}

/** The series colours, by the name of an app.css custom property. */
const seriesColors = {
  ok: "--ok",
  bad: "--bad",
  warn: "--warn",
  accent: "--accent",
  muted: "--muted",
} as const;

interface ChartSeries {
  readonly label: string;
  readonly data: readonly number[];
  /** A key of seriesColors. */
  readonly color: keyof typeof seriesColors;
}

export interface ChartViewProps {
  readonly type: "bar" | "line";
  readonly labels: readonly string[];
  readonly series: readonly ChartSeries[];
  /** Stack the bars (counts by outcome). */
  readonly stacked?: boolean;
  /** The y axis' title, e.g. "seconds". */
  readonly yTitle?: string;
  /** The accessible name of the chart (the canvas is an image to assistive technology). */
  readonly label: string;
}

export function ChartView(props: ChartViewProps) {
  const canvas = useRef<HTMLCanvasElement>(null);
  useEffect(() => {
    const el = canvas.current;
    if (!el) return undefined;
    let chart: Chart | undefined;
    let ChartClass: typeof Chart | undefined;
    let gone = false;
    const draw = () => {
      if (!ChartClass || gone) return;
      chart?.destroy();
      const fg = themeColor("--fg");
      const grid = themeColor("--border");
      const data: ChartData<"bar" | "line"> = {
        labels: [...props.labels],
        datasets: props.series.map((s) => {
          const c = themeColor(seriesColors[s.color]);
          return {
            label: s.label,
            data: [...s.data],
            backgroundColor: c,
            borderColor: c,
            borderWidth: props.type === "line" ? 2 : 0,
            pointRadius: props.type === "line" ? 0 : undefined,
          };
        }),
      };
      chart = new ChartClass(el, {
        type: props.type,
        data,
        options: {
          responsive: true,
          maintainAspectRatio: false,
          animation: false,
          color: fg,
          plugins: { legend: { labels: { color: fg } } },
          scales: {
            x: {
              stacked: props.stacked ?? false,
              ticks: { color: fg, maxRotation: 0, autoSkip: true },
              grid: { color: grid },
            },
            y: {
              stacked: props.stacked ?? false,
              beginAtZero: true,
              ticks: { color: fg },
              grid: { color: grid },
              title: props.yTitle ? { display: true, text: props.yTitle, color: fg } : undefined,
            },
          },
        },
      });
    };
    void loadChart().then((c) => {
      ChartClass = c;
      draw();
    });
    window.addEventListener(themeChanged, draw);
    return () => {
      gone = true;
      window.removeEventListener(themeChanged, draw);
      chart?.destroy();
    };
  }, [
    props.type,
    JSON.stringify(props.labels),
    JSON.stringify(props.series),
    props.stacked,
    props.yTitle,
  ]);
  return (
    <div class="chart">
      <canvas ref={canvas} role="img" aria-label={props.label} />
    </div>
  );
}
