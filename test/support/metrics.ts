import parsePrometheusTextFormat, {
  type PrometheusFamily,
  type PrometheusSample,
} from "parse-prometheus-text-format";

/** One scrape of a /metrics endpoint, parsed by a Prometheus text-format parser. */
export interface Scrape {
  readonly families: ReadonlyMap<string, PrometheusFamily>;
  /**
   * The value of `name` with exactly these labels (a histogram: its _count); 0 when the series is
   * absent.
   */
  value(name: string, labels?: Readonly<Record<string, string>>): number;
}

/** GETs `${url}/metrics`, checks the reply is the Prometheus text format, and parses it. */
export async function scrape(url: string): Promise<Scrape> {
  const res = await fetch(`${url}/metrics`);
  const text = await res.text();
  if (res.status !== 200) throw new Error(`GET /metrics answered ${res.status}: ${text}`);
  if (!res.headers.get("content-type")?.startsWith("text/plain; version=0.0.4"))
    throw new Error(`GET /metrics content type ${res.headers.get("content-type")}`);
  const families = new Map(parsePrometheusTextFormat(text).map((f) => [f.name, f]));
  // The parser drops the labels, _count and _sum of a labelled histogram (yunyu/parse-prometheus-
  // text-format#13, fix unreleased). Without the TYPE lines each histogram series parses as an
  // untyped family of its own name (x_bucket, x_sum, x_count; again for each label set), labels
  // intact: read counts there.
  const series = new Map<string, PrometheusSample[]>();
  for (const f of parsePrometheusTextFormat(text.replace(/^# TYPE \S+ histogram$/gm, "")))
    series.set(f.name, [...(series.get(f.name) ?? []), ...f.metrics]);
  return {
    families,
    value(name, labels = {}) {
      const wanted = Object.entries(labels);
      const samples =
        families.get(name)?.type === "HISTOGRAM"
          ? series.get(`${name}_count`)
          : families.get(name)?.metrics;
      const sample = samples?.find((m) => {
        const have = m.labels ?? {};
        return (
          Object.keys(have).length === wanted.length && wanted.every(([k, v]) => have[k] === v)
        );
      });
      return Number(sample?.value ?? 0);
    },
  };
}

/** GETs a health path; the status and the JSON body. */
export async function health(
  url: string,
  path: "/healthz" | "/readyz",
): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(`${url}${path}`);
  return { status: res.status, json: (await res.json()) as Record<string, unknown> };
}
