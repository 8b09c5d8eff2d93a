// The audit trail: search by identity, decision and time range (AdminService.ListAuditRecords).
export function AuditPage() {
  return (
    <section>
      <h1>Audit</h1>
      <p class="muted">Not built yet.</p>
    </section>
  );
}
