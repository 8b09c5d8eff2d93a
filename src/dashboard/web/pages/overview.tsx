// The overview: StatusService.GetStatus (runners, queues, pool, certificates, database and audit
// health) and, below, charts of StatsService.GetStats. Reloads on events that change them.
import { useEffect } from "preact/hooks";
import type { GetStatsResponse } from "../../../../gen/forelead/admin/v1/stats_pb.js";
import type { GetStatusResponse } from "../../../../gen/forelead/admin/v1/status_pb.js";
import { ChartView } from "../chart.js";
import { stats, status } from "../clients.js";
import { useData } from "../data.js";
import { ErrorNote } from "../errors.js";
import { Time, formatSeconds } from "../time.js";

/** The events after which the numbers may have moved. */
const statusEvents = [
  "job.queued",
  "job.leased",
  "job.settled",
  "job.requeued",
  "runner.registered",
  "runner.paused",
  "runner.resumed",
  "runner.retired",
  "runner.lease_lost",
  "workspace.paused",
  "workspace.resumed",
];

function Stat({
  label,
  value,
  id,
}: {
  label: string;
  value: string | number | bigint | undefined;
  id?: string;
}) {
  return (
    <div class="stat" data-stat={id}>
      <div class="stat-value">{value === undefined ? "-" : String(value)}</div>
      <div class="stat-label">{label}</div>
    </div>
  );
}

function StatusView({ s }: { s: GetStatusResponse }) {
  const r = s.runners;
  const p = s.pool;
  const d = s.database;
  const c = s.certificates;
  const queued = s.workspaces.reduce((n, w) => n + Number(w.queued), 0);
  const running = s.workspaces.reduce((n, w) => n + Number(w.running), 0);
  return (
    <>
      <div class="stats" aria-label="Fleet">
        <Stat id="runners-connected" label="runners connected" value={r?.connected} />
        <Stat id="runners-registered" label="registered" value={r?.registered} />
        <Stat id="runners-busy" label="busy" value={r?.busy} />
        <Stat id="runners-paused" label="paused" value={r?.paused} />
        <Stat id="jobs-queued" label="jobs queued" value={queued} />
        <Stat id="jobs-running" label="running" value={running} />
        <Stat
          id="slots-free"
          label="slots free"
          value={p ? `${p.slotsFree} / ${p.slotsTotal}` : undefined}
        />
      </div>
      <section>
        <h2>Queues</h2>
        {s.workspaces.length === 0 ? (
          <p class="muted">No workspace has jobs.</p>
        ) : (
          <div class="table-wrap">
            <table class="queues">
              <thead>
                <tr>
                  <th scope="col">workspace</th>
                  <th scope="col">queued</th>
                  <th scope="col">running</th>
                  <th scope="col">waiting for input</th>
                  <th scope="col">oldest wait</th>
                  <th scope="col">state</th>
                </tr>
              </thead>
              <tbody>
                {s.workspaces.map((w) => (
                  <tr key={w.workspaceId} data-workspace={w.workspaceId}>
                    <th scope="row">{w.workspaceId}</th>
                    <td data-col="queued">{String(w.queued)}</td>
                    <td data-col="running">{String(w.running)}</td>
                    <td>{String(w.waitingInput)}</td>
                    <td>{w.queued > 0n ? formatSeconds(w.oldestQueuedSeconds) : "-"}</td>
                    <td>
                      {w.paused ? (
                        <span class="badge warn">paused</span>
                      ) : (
                        <span class="badge ok">active</span>
                      )}
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        )}
      </section>
      <div class="cards">
        <section class="card">
          <h2>Pool</h2>
          <dl>
            <dt>slots free</dt>
            <dd>{p ? `${p.slotsFree} of ${p.slotsTotal}` : "-"}</dd>
            <dt>CPU free</dt>
            <dd>{p ? `${p.cpuFree} of ${p.cpuTotal}` : "-"}</dd>
            <dt>memory free</dt>
            <dd>{p ? `${bytes(p.memoryBytesFree)} of ${bytes(p.memoryBytesTotal)}` : "-"}</dd>
          </dl>
        </section>
        <section class="card">
          <h2>Database and audit</h2>
          <dl>
            <dt>database</dt>
            <dd>
              {d?.kind}{" "}
              {d?.reachable ? (
                <span class="badge ok">reachable ({d.roundTripMs.toFixed(1)} ms)</span>
              ) : (
                <span class="badge bad">unreachable</span>
              )}
            </dd>
            <dt>migration</dt>
            <dd>{d?.migration || "-"}</dd>
            <dt>LISTEN</dt>
            <dd>
              {d?.listenConnected ? (
                <span class="badge ok">connected</span>
              ) : (
                <span class="badge bad">down</span>
              )}
            </dd>
            <dt>audit backlog</dt>
            <dd>
              {d && d.auditBacklogRecords > 0n ? (
                <span class="badge warn">
                  {String(d.auditBacklogRecords)} record{d.auditBacklogRecords === 1n ? "" : "s"}
                </span>
              ) : (
                <span class="badge ok">none</span>
              )}
              {d?.auditOldestUnwritten ? (
                <>
                  {" "}
                  oldest <Time at={d.auditOldestUnwritten} />
                </>
              ) : null}
            </dd>
          </dl>
        </section>
        <section class="card">
          <h2>Certificates</h2>
          <dl>
            <dt>server until</dt>
            <dd>
              <Time at={c?.serverNotAfter} />
            </dd>
            <dt>issuer until</dt>
            <dd>
              <Time at={c?.issuerNotAfter} />
            </dd>
            <dt>ending within 24 h</dt>
            <dd>
              {c && c.expiringWithin24h > 0 ? (
                <span class="badge warn">{c.expiringWithin24h}</span>
              ) : (
                "0"
              )}
            </dd>
          </dl>
          {c && c.expiring.length > 0 ? (
            <ul class="plain">
              {c.expiring.map((x) => (
                <li key={x.serial}>
                  <code>{x.spiffeId}</code> until <Time at={x.notAfter} />
                </li>
              ))}
            </ul>
          ) : null}
        </section>
      </div>
      <p class="muted small">
        forelead {s.build?.version} (commit{" "}
        <code title={s.build?.commit}>{s.build?.commit.slice(0, 12)}</code>), started{" "}
        <Time at={s.startedAt} />; {s.replicas.length} replica{s.replicas.length === 1 ? "" : "s"}
      </p>
    </>
  );
}

function bytes(n: bigint): string {
  const v = Number(n);
  if (v >= 2 ** 30) return `${(v / 2 ** 30).toFixed(1)} GiB`;
  if (v >= 2 ** 20) return `${(v / 2 ** 20).toFixed(0)} MiB`;
  return `${v} B`;
}

/**
 * The stats the charts show: jobs settled per hour by final state (the last 24 hours), and the
 * day's wait and run percentiles per workspace.
 */
interface Charts {
  readonly hours: readonly { start: Date; byState: Map<string, number> }[];
  readonly day: GetStatsResponse;
}

const hourMs = 3600_000;

/**
 * 24 windows of one hour each (the last one the hour so far), asked in parallel on one HTTP/2
 * connection, and the whole day.
 */
async function loadCharts(signal: AbortSignal): Promise<Charts> {
  const first = Math.floor(Date.now() / hourMs) * hourMs - 23 * hourMs;
  const starts = Array.from({ length: 24 }, (_, i) => new Date(first + i * hourMs));
  const [day, ...hourly] = await Promise.all([
    stats.getStats({ since: new Date(first).toISOString() }, { signal }),
    ...starts.map((start) =>
      stats.getStats(
        { since: start.toISOString(), until: new Date(start.getTime() + hourMs).toISOString() },
        { signal },
      ),
    ),
  ]);
  const hours = starts.map((start, i) => {
    const byState = new Map<string, number>();
    for (const w of hourly[i]!.workspaces)
      for (const c of w.byState) byState.set(c.key, (byState.get(c.key) ?? 0) + Number(c.count));
    return { start, byState };
  });
  return { hours, day: day! };
}

const hourLabel = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit" });

function ChartsView({ c }: { c: Charts }) {
  const labels = c.hours.map((h) => hourLabel.format(h.start));
  const state = (key: string) => c.hours.map((h) => h.byState.get(key) ?? 0);
  const ws = c.day.workspaces;
  const settled = c.hours.reduce(
    (n, h) => n + [...h.byState.values()].reduce((a, b) => a + b, 0),
    0,
  );
  return (
    <div class="charts">
      <section class="card">
        <h2>Jobs settled per hour</h2>
        <p class="muted small" data-stat="settled-24h">
          {settled} in the last 24 hours
        </p>
        <ChartView
          type="bar"
          stacked
          label="jobs settled per hour by final state, the last 24 hours"
          labels={labels}
          series={[
            { label: "succeeded", data: state("succeeded"), color: "ok" },
            { label: "failed", data: state("failed"), color: "bad" },
            { label: "cancelled", data: state("cancelled"), color: "muted" },
          ]}
        />
      </section>
      <section class="card">
        <h2>Wait and run time (24 h)</h2>
        {ws.length === 0 ? (
          <p class="muted">No job settled in the last 24 hours.</p>
        ) : (
          <ChartView
            type="bar"
            label="wait and run time percentiles per workspace, the last 24 hours"
            yTitle="seconds"
            labels={ws.map((w) => w.workspaceId)}
            series={[
              { label: "wait p50", data: ws.map((w) => w.wait?.p50Seconds ?? 0), color: "accent" },
              { label: "wait p95", data: ws.map((w) => w.wait?.p95Seconds ?? 0), color: "warn" },
              { label: "run p50", data: ws.map((w) => w.run?.p50Seconds ?? 0), color: "ok" },
              { label: "run p95", data: ws.map((w) => w.run?.p95Seconds ?? 0), color: "bad" },
            ]}
          />
        )}
      </section>
    </div>
  );
}

/**
 * The performance mark the overview sets when its status numbers first show (docs/dashboard.md:
 * time to first render).
 */
const firstRenderMark = "forelead:overview-rendered";

export function OverviewPage() {
  const s = useData((signal) => status.getStatus({}, { signal }), [], statusEvents);
  useEffect(() => {
    if (s.data && performance.getEntriesByName(firstRenderMark).length === 0)
      performance.mark(firstRenderMark);
  }, [s.data]);
  // 25 calls: redrawn at most every 5 s while jobs settle.
  const c = useData(loadCharts, [], ["job.settled"], 5_000);
  return (
    <section>
      <h1>Overview</h1>
      <ErrorNote error={s.error} what="status" />
      {s.data ? <StatusView s={s.data} /> : s.loading ? <p class="muted">Loading…</p> : null}
      <ErrorNote error={c.error} what="stats" />
      {c.data ? <ChartsView c={c.data} /> : null}
    </section>
  );
}
