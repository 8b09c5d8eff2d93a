// A job's state as a badge: its colour says good (succeeded), bad (failed), warn (cancelled,
// cancel requested, waiting for input) or neutral (queued, running).
const tones: Readonly<Record<string, string>> = {
  succeeded: "ok",
  failed: "bad",
  cancelled: "warn",
  waiting_input: "warn",
  running: "run",
};

/** Whether a job in `state` may still change (cancel applies). */
export function isActive(state: string): boolean {
  return state === "queued" || state === "running" || state === "waiting_input";
}

export function StateBadge({
  state,
  cancelRequested,
}: {
  state: string;
  cancelRequested?: boolean;
}) {
  return (
    <span class="state" data-state-badge={state}>
      <span class={`badge ${tones[state] ?? ""}`}>{state.replace(/_/g, " ")}</span>
      {cancelRequested && isActive(state) ? <span class="badge warn">cancel requested</span> : null}
    </span>
  );
}
