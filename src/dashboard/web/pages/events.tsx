// Placeholder (dash-b replaces it): the global event stream, live (subscribe from ../live.ts).
// Props: none.
export function EventsPage() {
  return (
    <section>
      <h1>Events</h1>
      <p class="muted">Not built yet.</p>
    </section>
  );
}
