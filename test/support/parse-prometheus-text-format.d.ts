// The parser ships no types; this is the shape its README documents (values as strings).
declare module "parse-prometheus-text-format" {
  export interface PrometheusSample {
    readonly labels?: Readonly<Record<string, string>>;
    readonly value?: string;
    /** Histograms and summaries. */
    readonly count?: string;
    readonly sum?: string;
    readonly buckets?: Readonly<Record<string, string>>;
  }
  export interface PrometheusFamily {
    readonly name: string;
    readonly help: string;
    readonly type: "COUNTER" | "GAUGE" | "HISTOGRAM" | "SUMMARY" | "UNTYPED";
    readonly metrics: readonly PrometheusSample[];
  }
  export default function parsePrometheusTextFormat(text: string): PrometheusFamily[];
}
