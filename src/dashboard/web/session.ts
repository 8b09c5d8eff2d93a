// The browser's side of the dashboard's sessions (src/dashboard/server/auth.ts): who is signed in,
// the session's CSRF token that every API call carries, sign-in and sign-out. The session cookie
// itself is HttpOnly: scripts never see it.

/** The signed-in person and the session's CSRF token, as GET /auth/session answers. */
export interface SignedIn {
  /** `claim`: the provider's identity claim the ID was made from (single sign-on only). */
  readonly person: { readonly id: string; readonly via: string; readonly claim?: string };
  readonly csrfToken: string;
  readonly expiresAt: string;
}

/** The ways this dashboard signs people in (GET /auth/session's 401 lists them). */
export type SignInMethod = "token" | "sso";

/** Signed in, or not (and how one may sign in). */
export type SessionState =
  | { readonly signedIn: SignedIn }
  | { readonly signedIn: undefined; readonly methods: readonly SignInMethod[] };

/** The request header that carries the CSRF token. */
export const csrfHeader = "x-forelead-csrf";

/** The response header of the dashboard's own 401 (no session), as against the control plane's. */
export const signedOutHeader = "x-forelead-signed-out";

let csrfToken = "";

/** The current session's CSRF token ("" before sign-in). */
export function currentCsrfToken(): string {
  return csrfToken;
}

function keep(s: SignedIn): SignedIn {
  csrfToken = s.csrfToken;
  return s;
}

/** A refusal's message from the dashboard's error JSON (or the HTTP status). */
async function refusalOf(res: Response): Promise<string> {
  try {
    const body = (await res.json()) as { message?: string };
    if (body.message) return body.message.replace(/^dashboard: /, "");
  } catch {
    // not JSON
  }
  return `HTTP ${res.status}`;
}

/** Asks the dashboard whether this browser is signed in. */
export async function loadSession(): Promise<SessionState> {
  const res = await fetch("/auth/session", { credentials: "same-origin", cache: "no-store" });
  if (res.ok) return { signedIn: keep((await res.json()) as SignedIn) };
  if (res.status !== 401) throw new Error(await refusalOf(res));
  const body = (await res.json().catch(() => ({}))) as { signIn?: SignInMethod[] };
  return { signedIn: undefined, methods: body.signIn ?? ["token"] };
}

/** Exchanges the one-time sign-in token for a session; throws with the dashboard's reason. */
export async function signInWithToken(token: string): Promise<SignedIn> {
  const res = await fetch("/auth/sign-in/token", {
    method: "POST",
    credentials: "same-origin",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ token }),
  });
  if (!res.ok) throw new Error(await refusalOf(res));
  return keep((await res.json()) as SignedIn);
}

/** Ends the session and shows the sign-in page. */
export async function signOut(): Promise<void> {
  await fetch("/auth/sign-out", {
    method: "POST",
    credentials: "same-origin",
    headers: { [csrfHeader]: csrfToken },
  }).catch(() => undefined);
  signedOut();
}

/**
 * The session is gone (signed out, ended, or the dashboard restarted without it): start the page
 * again, which shows the sign-in page and stops every stream of the old session.
 */
export function signedOut(): void {
  csrfToken = "";
  location.reload();
}
