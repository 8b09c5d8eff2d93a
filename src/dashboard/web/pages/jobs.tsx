// Placeholder (dash-b replaces it): the jobs history with filters and each queued job's waiting reason.
// Props: none; the filters live in the page's own state (or the hash query if it chooses).
export function JobsPage() {
  return (
    <section>
      <h1>Jobs</h1>
      <p class="muted">Not built yet.</p>
    </section>
  );
}
