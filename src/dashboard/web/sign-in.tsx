// The sign-in page: all a browser without a session gets. The local way is the one-time token the
// dashboard wrote to a file on its host (and showed on the terminal that started it); a dashboard
// with single sign-on offers only its button (the provider's refusals come back as a page of
// src/dashboard/server/sign-in-sso.ts).
import { useState } from "preact/hooks";
import { signInWithToken, type SignedIn, type SignInMethod } from "./session.js";

export function SignInPage({
  methods,
  onSignedIn,
}: {
  methods: readonly SignInMethod[];
  onSignedIn: (s: SignedIn) => void;
}) {
  const [token, setToken] = useState("");
  const [error, setError] = useState<string | undefined>(undefined);
  const [busy, setBusy] = useState(false);
  const submit = (e: Event) => {
    e.preventDefault();
    setBusy(true);
    signInWithToken(token).then(onSignedIn, (err: unknown) => {
      setError(err instanceof Error ? err.message : String(err));
      setToken("");
      setBusy(false);
    });
  };
  return (
    <main id="main" class="sign-in" tabIndex={-1}>
      <h1>Sign in</h1>
      {methods.includes("sso") && (
        <p>
          {/* A navigation, not a fetch: the provider's pages take over the tab, then send it
              back to /auth/sso/callback. */}
          <a class="button sso" href="/auth/sso/start">
            Sign in with SSO
          </a>
        </p>
      )}
      {methods.includes("token") && (
        <form onSubmit={submit} aria-describedby="sign-in-hint">
          <label for="sign-in-token">One-time sign-in token</label>
          <p id="sign-in-hint" class="hint">
            <code>forelead dashboard</code> wrote it to a file readable only by you (the path is on
            the terminal that started it) and showed it there. Each token works once; the file then
            holds the next.
          </p>
          <input
            id="sign-in-token"
            name="token"
            type="password"
            autocomplete="off"
            spellcheck={false}
            required
            value={token}
            onInput={(e) => setToken((e.target as HTMLInputElement).value)}
          />
          <button type="submit" disabled={busy}>
            Sign in
          </button>
          {error && (
            <div class="error" role="alert" data-code="unauthenticated">
              <strong>sign-in refused:</strong> <span>{error}</span>
            </div>
          )}
        </form>
      )}
    </main>
  );
}
