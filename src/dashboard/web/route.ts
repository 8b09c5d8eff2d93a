// Hash routing: #/overview, #/runners, #/jobs, #/jobs/<id>, #/pipelines, #/pipelines/<id>,
// #/events, #/audit.
import { useEffect, useState } from "preact/hooks";

export interface Route {
  readonly page:
    "overview" | "runners" | "jobs" | "job" | "pipelines" | "pipeline" | "events" | "audit";
  /** The job id of #/jobs/<id>, the pipeline id of #/pipelines/<id>. */
  readonly id?: string;
}

function parseRoute(hash: string): Route {
  const parts = hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  const [head, id] = parts;
  if (head === "jobs" && id) return { page: "job", id };
  if (head === "pipelines" && id) return { page: "pipeline", id };
  if (
    head === "runners" ||
    head === "jobs" ||
    head === "pipelines" ||
    head === "events" ||
    head === "audit"
  )
    return { page: head };
  return { page: "overview" };
}

/** The link to a route, e.g. href(“job”, id). */
export function href(page: Route["page"], id?: string): string {
  if (page === "job") return `#/jobs/${encodeURIComponent(id ?? "")}`;
  if (page === "pipeline") return `#/pipelines/${encodeURIComponent(id ?? "")}`;
  return `#/${page}`;
}

/** The current route, following hashchange. */
export function useRoute(): Route {
  const [route, setRoute] = useState(() => parseRoute(location.hash));
  useEffect(() => {
    const on = () => setRoute(parseRoute(location.hash));
    window.addEventListener("hashchange", on);
    // The hash may have changed between the first render and this effect (preact runs effects
    // after paint): a page that mounts after sign-in missed such a change (CI-like load, the
    // browser tests' open() right after signing in).
    on();
    return () => window.removeEventListener("hashchange", on);
  }, []);
  return route;
}
