// The dashboard's shell: the sign-in page until the browser has a session; then the nav, the
// signed-in person and sign-out, the theme toggle, the live-stream state and the page of the route.
import { useEffect, useState } from "preact/hooks";
import { onLiveState, type LiveState } from "./live.js";
import { AuditPage } from "./pages/audit.js";
import { EventsPage } from "./pages/events.js";
import { JobPage } from "./pages/job.js";
import { JobsPage } from "./pages/jobs.js";
import { OverviewPage } from "./pages/overview.js";
import { PipelinePage } from "./pages/pipeline.js";
import { PipelinesPage } from "./pages/pipelines.js";
import { RunnersPage } from "./pages/runners.js";
import { href, useRoute, type Route } from "./route.js";
import { loadSession, signOut, type SessionState, type SignedIn } from "./session.js";
import { SignInPage } from "./sign-in.js";
import { applyTheme, currentTheme, type Theme } from "./theme.js";

const nav: readonly { page: Route["page"]; label: string }[] = [
  { page: "overview", label: "Overview" },
  { page: "runners", label: "Runners" },
  { page: "jobs", label: "Jobs" },
  { page: "pipelines", label: "Pipelines" },
  { page: "events", label: "Events" },
  { page: "audit", label: "Audit" },
];

function Page({ route }: { route: Route }) {
  switch (route.page) {
    case "runners":
      return <RunnersPage />;
    case "jobs":
      return <JobsPage />;
    case "job":
      return <JobPage jobId={route.id ?? ""} />;
    case "pipelines":
      return <PipelinesPage />;
    case "pipeline":
      return <PipelinePage pipelineId={route.id ?? ""} />;
    case "events":
      return <EventsPage />;
    case "audit":
      return <AuditPage />;
    default:
      return <OverviewPage />;
  }
}

export function App() {
  const [state, setState] = useState<SessionState | undefined>(undefined);
  const [error, setError] = useState<string | undefined>(undefined);
  useEffect(() => applyTheme(currentTheme(), false), []);
  useEffect(() => {
    loadSession().then(setState, (err: unknown) => setError(String(err)));
  }, []);
  if (error)
    return (
      <main id="main">
        <h1>Forelead</h1>
        <div class="error" role="alert">
          {error}
        </div>
      </main>
    );
  if (!state) return null;
  if (!state.signedIn)
    return <SignInPage methods={state.methods} onSignedIn={(signedIn) => setState({ signedIn })} />;
  return <Shell signedIn={state.signedIn} />;
}

/** The pages of a signed-in person; the live stream starts here, never before sign-in. */
function Shell({ signedIn }: { signedIn: SignedIn }) {
  const route = useRoute();
  const [theme, setTheme] = useState<Theme>(currentTheme);
  const [live, setLive] = useState<LiveState>("connecting");
  useEffect(() => onLiveState(setLive), []);
  const current =
    route.page === "job" ? "jobs" : route.page === "pipeline" ? "pipelines" : route.page;
  const toggle = () => {
    const next = theme === "dark" ? "light" : "dark";
    applyTheme(next, true);
    setTheme(next);
  };
  return (
    <>
      <a class="skip" href="#main">
        Skip to content
      </a>
      <header class="top">
        <span class="brand">Forelead</span>
        <nav aria-label="Pages">
          <ul>
            {nav.map((n) => (
              <li key={n.page}>
                <a href={href(n.page)} aria-current={n.page === current ? "page" : undefined}>
                  {n.label}
                </a>
              </li>
            ))}
          </ul>
        </nav>
        <span class={`live live-${live}`} title="the control plane's event stream">
          {live}
        </span>
        <span class="person" title={`signed in by ${signedIn.person.via}`}>
          {signedIn.person.id}
          {signedIn.person.claim !== undefined && (
            <span class="person-claim"> ({signedIn.person.claim})</span>
          )}
        </span>
        <button type="button" class="sign-out" onClick={() => void signOut()}>
          Sign out
        </button>
        <button
          type="button"
          class="theme"
          onClick={toggle}
          aria-label={`Switch to the ${theme === "dark" ? "light" : "dark"} theme`}
        >
          {theme === "dark" ? "Light" : "Dark"}
        </button>
      </header>
      <main id="main" tabIndex={-1}>
        <Page route={route} />
      </main>
    </>
  );
}
