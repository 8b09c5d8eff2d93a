// Placeholder (dash-b replaces it): one job — timeline, attempts, live log, events, samples, artifacts, cancel.
// Props: jobId — the id from the route #/jobs/<id> (route.ts), never empty when routed.
export function JobPage({ jobId }: { jobId: string }) {
  return (
    <section>
      <h1>Job {jobId}</h1>
      <p class="muted">Not built yet.</p>
    </section>
  );
}
