/**
 * The events a job writes itself (docs/job-contract.md, "Events"): one JSON
 * object a line in the file FORELEAD_EVENTS names, each with a string
 * `type`. The runner checks every line here before it joins the job's
 * event stream; the type prefixes the runner and control plane use are
 * reserved, so a job cannot forge job.exited or a resource.sample.
 */

/** The env variable naming the job's events file. */
export const jobEventsEnv = "FORELEAD_EVENTS";

/** Type prefixes a job may not use: the runner's own events. */
const reservedEventPrefixes = ["job.", "resource.", "runner.", "forelead."] as const;

/**
 * The event the runner sends a job's progress as; the control plane keeps the last one as the job's
 * `progress`.
 */
export const progressEventType = "job.progress";

/** The event the runner sends when it drops a line of the job's events file. */
export const droppedEventType = "runner.event_dropped";

/** A job event, checked: an object with a non-empty string `type` that is not reserved. */
export type JobEventData = { readonly type: string; readonly [field: string]: unknown };

/** Parses one line of the events file, or says why it is refused. */
export function parseJobEvent(
  line: string,
): { readonly event: JobEventData } | { readonly problem: string } {
  let value: unknown;
  try {
    value = JSON.parse(line);
  } catch (err) {
    return { problem: `is not JSON (${(err as Error).message})` };
  }
  if (value === null || typeof value !== "object" || Array.isArray(value))
    return { problem: "is not a JSON object" };
  const type = (value as { type?: unknown }).type;
  if (typeof type !== "string" || type === "") return { problem: 'has no "type" string' };
  const reserved = reservedEventPrefixes.find((p) => type.startsWith(p));
  if (reserved)
    return {
      problem:
        `has type ${JSON.stringify(type.slice(0, 80))}: the prefix "${reserved}" ` +
        `is reserved for the runner's own events`,
    };
  return { event: value as JobEventData };
}
