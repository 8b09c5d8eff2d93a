// The runners (AdminService.ListRunners) with pause/resume (FleetService) and retire (AdminService).
export function RunnersPage() {
  return (
    <section>
      <h1>Runners</h1>
      <p class="muted">Not built yet.</p>
    </section>
  );
}
