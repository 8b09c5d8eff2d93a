// The runners: AdminService.ListRunners (slots, labels, live leases, last seen, retired), their
// newest certificates (AdminService.ListCertificates), whether each is paused, and pause/resume
// (FleetService) and retire (AdminService) with a confirmation; a refusal (the role lacking) shows
// in the page. Reloads on runner and lease events.
//
// Paused: ListRunners carries pausedAt and pausedBy while a runner is paused.
import { useEffect, useState } from "preact/hooks";
import type { IssuedCertificate, Runner } from "../../../../gen/forelead/admin/v1/admin_pb.js";
import { admin, fleet } from "../clients.js";
import { ConfirmButton } from "../confirm.js";
import { useData } from "../data.js";
import { ErrorNote } from "../errors.js";
import { Time } from "../time.js";

const runnerEvents = [
  "runner.registered",
  "runner.paused",
  "runner.resumed",
  "runner.retired",
  "runner.forgotten",
  "runner.lease_lost",
  "job.leased",
  "job.settled",
  "job.requeued",
];
const key = (workspaceId: string, runnerId: string) => `${workspaceId}\u0000${runnerId}`;

interface RunnersView {
  readonly runners: readonly Runner[];
  readonly certs: ReadonlyMap<string, IssuedCertificate>;
}

async function load(signal: AbortSignal): Promise<RunnersView> {
  const [list, certs] = await Promise.all([
    admin.listRunners({}, { signal }),
    admin.listCertificates({}, { signal }),
  ]);
  const byRunner = new Map<string, IssuedCertificate>();
  for (const c of certs.certificates)
    if (c.runnerId && !byRunner.has(key(c.workspaceId, c.runnerId)))
      byRunner.set(key(c.workspaceId, c.runnerId), c);
  return { runners: list.runners, certs: byRunner };
}

const certBadge: Readonly<Record<string, string>> = {
  current: "ok",
  expiring_soon: "warn",
  renewal_overdue: "bad",
  expired: "bad",
  superseded: "muted",
  retired: "muted",
};

/**
 * The badge of each runner state (forelead_runner_state, computed by the control plane: the page
 * never guesses liveness itself).
 */
const stateBadge: Readonly<Record<string, string>> = {
  idle: "ok",
  busy: "ok",
  paused: "warn",
  draining: "warn",
  offline: "bad",
  retired: "muted",
};

function RunnerRow({
  r,
  v,
  onError,
  onDone,
}: {
  r: Runner;
  v: RunnersView;
  onError: (what: string) => (err: unknown) => void;
  onDone: () => void;
}) {
  const k = key(r.workspaceId, r.runnerId);
  const paused = r.pausedAt !== undefined;
  const retired = r.retiredAt !== undefined;
  const cert = v.certs.get(k);
  const leases = r.liveLeases ?? 0;
  const ids = { apiVersion: "v1", runnerId: r.runnerId, workspaceId: r.workspaceId };
  const name = `runner ${r.runnerId} (${r.workspaceId})`;
  return (
    <tr data-runner={r.runnerId}>
      <th scope="row">
        <code>{r.runnerId}</code>
        <div class="muted small">{r.workspaceId}</div>
      </th>
      <td data-col="state">
        <span
          class={`badge ${stateBadge[r.state] ?? "muted"}`}
          title={paused ? `paused by ${r.pausedBy || "?"}` : undefined}
        >
          {r.state || "unknown"}
        </span>
        {r.version ? <div class="muted small">{r.version}</div> : null}
      </td>
      <td data-col="leases">
        {leases} / {r.slots}
      </td>
      <td>
        {r.labels.length ? (
          r.labels.map((l) => (
            <code class="label" key={l}>
              {l}
            </code>
          ))
        ) : (
          <span class="muted">-</span>
        )}
      </td>
      <td class="small">
        {r.os || "-"}/{r.architecture || "-"}, {r.cpu} CPU
      </td>
      <td>
        <Time at={r.lastSeenAt} />
      </td>
      <td>
        {cert ? (
          <>
            <Time at={cert.notAfter} />{" "}
            <span class={`badge ${certBadge[cert.status] ?? "muted"}`}>
              {cert.status.replace(/_/g, " ")}
            </span>
          </>
        ) : (
          <span class="muted">-</span>
        )}
      </td>
      <td>
        {retired ? null : (
          <div class="actions">
            {paused ? (
              <ConfirmButton
                label="Resume"
                ariaLabel={`Resume ${name}`}
                title={`Resume ${name}?`}
                body="It gets new leases again."
                onConfirm={() => fleet.resumeRunner(ids)}
                onError={onError(`resume ${name}`)}
                onDone={onDone}
              />
            ) : (
              <ConfirmButton
                label="Pause"
                ariaLabel={`Pause ${name}`}
                title={`Pause ${name}?`}
                body="It gets no new lease until resumed; the jobs it holds go on and settle."
                withReason
                onConfirm={(reason) => fleet.pauseRunner({ ...ids, reason })}
                onError={onError(`pause ${name}`)}
                onDone={onDone}
              />
            )}
            <ConfirmButton
              label="Retire"
              ariaLabel={`Retire ${name}`}
              title={`Retire ${name}?`}
              body="Its certificates stop working at once and its leases are released (their jobs go back to the queue). It must enroll again to come back."
              danger
              withReason
              onConfirm={(reason) => admin.retireRunner({ ...ids, reason })}
              onError={onError(`retire ${name}`)}
              onDone={onDone}
            />
          </div>
        )}
      </td>
    </tr>
  );
}

/**
 * A runner turns offline by its silence, which no event reports: the page reads the states again
 * this often, besides on events.
 */
const silenceCheckMs = 15_000;

export function RunnersPage() {
  const d = useData(load, [], runnerEvents);
  const { reload } = d;
  useEffect(() => {
    const timer = setInterval(reload, silenceCheckMs);
    return () => clearInterval(timer);
  }, []);
  const [failure, setFailure] = useState<{ what: string; error: unknown } | undefined>(undefined);
  const v = d.data;
  return (
    <section>
      <h1>Runners</h1>
      <ErrorNote error={d.error} what="runners" />
      {failure ? <ErrorNote error={failure.error} what={failure.what} /> : null}
      {v ? (
        v.runners.length === 0 ? (
          <p class="muted">No runner has registered.</p>
        ) : (
          <div class="table-wrap">
            <table class="runners">
              <thead>
                <tr>
                  <th scope="col">runner</th>
                  <th scope="col">state</th>
                  <th scope="col">leases / slots</th>
                  <th scope="col">labels</th>
                  <th scope="col">platform</th>
                  <th scope="col">last seen</th>
                  <th scope="col">certificate until</th>
                  <th scope="col">actions</th>
                </tr>
              </thead>
              <tbody>
                {v.runners.map((r) => (
                  <RunnerRow
                    key={key(r.workspaceId, r.runnerId)}
                    r={r}
                    v={v}
                    onError={(what) => (error) => setFailure({ what, error })}
                    onDone={() => {
                      setFailure(undefined);
                      d.reload();
                    }}
                  />
                ))}
              </tbody>
            </table>
          </div>
        )
      ) : d.loading ? (
        <p class="muted">Loading…</p>
      ) : null}
    </section>
  );
}
