// <ErrorNote>: a refusal or failure shown in the page — a ConnectError's code (permission_denied,
// unavailable, ...) and the control plane's message, as it sent them.
import { Code, ConnectError } from "@connectrpc/connect";

/** The snake_case name of a Connect code, as the wire and the CLI spell it. */
function codeName(code: Code): string {
  return (Code[code] ?? "unknown").replace(/([a-z])([A-Z])/g, "$1_$2").toLowerCase();
}

/** Shows `error` (nothing when undefined). */
export function ErrorNote({ error, what }: { error: unknown; what?: string }) {
  if (error === undefined || error === null) return null;
  const e = ConnectError.from(error);
  return (
    <div class="error" role="alert" data-code={codeName(e.code)}>
      <strong>
        {what ? `${what}: ` : ""}
        {codeName(e.code)}
      </strong>{" "}
      <span>{e.rawMessage}</span>
    </div>
  );
}
