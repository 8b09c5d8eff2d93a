// The audit trail (AdminService.ListAuditRecords, newest first): search by identity, decision, kind
// (first: actions and refusals) and time range; "Older" reads the next page. Audit records have no event: the page reads on
// search.
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { useState } from "preact/hooks";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type {
  AuditRecord,
  ListAuditRecordsRequestSchema,
} from "../../../../gen/forelead/admin/v1/admin_pb.js";
import { admin } from "../clients.js";
import { useData } from "../data.js";
import { ErrorNote } from "../errors.js";
import { Time } from "../time.js";

interface Search {
  readonly spiffeId: string;
  readonly decision: string;
  readonly kind: string;
  /** datetime-local values (the browser's zone); "" for open. */
  readonly since: string;
  readonly until: string;
}

/** The first search: actions and refusals, not the routine allows of runners' requests. */
const initial: Search = { spiffeId: "", decision: "", kind: "notable", since: "", until: "" };
const pageSize = 100;

function request(
  s: Search,
  pageToken: string,
): MessageInitShape<typeof ListAuditRecordsRequestSchema> {
  const at = (v: string) => (v ? timestampFromDate(new Date(v)) : undefined);
  return {
    spiffeId: s.spiffeId.trim(),
    decision: s.decision,
    kind: s.kind,
    since: at(s.since),
    until: at(s.until),
    pageSize,
    pageToken,
  };
}

function Row({ r }: { r: AuditRecord }) {
  return (
    <tr data-audit={r.id}>
      <td>
        <Time at={r.at} />
        {r.count > 1 ? (
          <div class="muted small">
            ×{r.count} since <Time at={r.firstAt} />
          </div>
        ) : null}
      </td>
      <td data-col="kind">{r.kind}</td>
      <td data-col="decision">
        {r.decision ? (
          <span class={`badge ${r.decision === "allow" ? "ok" : "bad"}`}>{r.decision}</span>
        ) : (
          "-"
        )}
      </td>
      <td data-col="identity">
        <code>{r.spiffeId || "-"}</code>
      </td>
      <td>
        <code>{r.action || r.route}</code>
        {r.target ? <div class="small">{r.target}</div> : null}
      </td>
      <td class="small">{r.reason || "-"}</td>
    </tr>
  );
}

export function AuditPage() {
  const [form, setForm] = useState<Search>(initial);
  const [search, setSearch] = useState<Search>(initial);
  const [older, setOlder] = useState<{ records: AuditRecord[]; next: string } | undefined>(
    undefined,
  );
  const [olderError, setOlderError] = useState<unknown>(undefined);
  const d = useData((signal) => admin.listAuditRecords(request(search, ""), { signal }), [search]);
  const field = (name: keyof Search) => (e: Event) => {
    const value = (e.target as HTMLInputElement | HTMLSelectElement).value;
    setForm((f) => ({ ...f, [name]: value }));
  };
  const records = [...(d.data?.records ?? []), ...(older?.records ?? [])];
  const next = older ? older.next : (d.data?.nextPageToken ?? "");
  const readOlder = async () => {
    try {
      const page = await admin.listAuditRecords(request(search, next));
      setOlder({ records: [...(older?.records ?? []), ...page.records], next: page.nextPageToken });
      setOlderError(undefined);
    } catch (err) {
      setOlderError(err);
    }
  };
  return (
    <section>
      <h1>Audit</h1>
      <form
        class="toolbar"
        role="search"
        onSubmit={(e) => {
          e.preventDefault();
          setOlder(undefined);
          setSearch(form);
        }}
      >
        <label>
          identity (SPIFFE ID)
          <input
            type="search"
            name="spiffeId"
            value={form.spiffeId}
            onInput={field("spiffeId")}
            placeholder="spiffe://forelead/services/ci"
            size={32}
          />
        </label>
        <label>
          decision
          <select name="decision" value={form.decision} onChange={field("decision")}>
            <option value="">any</option>
            <option value="allow">allow</option>
            <option value="deny">deny</option>
          </select>
        </label>
        <label>
          kind
          <select name="kind" value={form.kind} onChange={field("kind")}>
            <option value="notable">actions and refusals</option>
            <option value="">any</option>
            <option value="decision">identity decisions</option>
            <option value="action">administrative actions</option>
          </select>
        </label>
        <label>
          from
          <input
            type="datetime-local"
            name="since"
            value={form.since}
            onInput={field("since")}
            step={1}
          />
        </label>
        <label>
          to
          <input
            type="datetime-local"
            name="until"
            value={form.until}
            onInput={field("until")}
            step={1}
          />
        </label>
        <button type="submit">Search</button>
      </form>
      <ErrorNote error={d.error} what="audit" />
      {d.data ? (
        records.length === 0 ? (
          <p class="muted">No record matches.</p>
        ) : (
          <>
            {d.loading ? <p class="muted">Searching…</p> : null}
            <div class="table-wrap" aria-busy={d.loading}>
              <table class="audit">
                <thead>
                  <tr>
                    <th scope="col">at</th>
                    <th scope="col">kind</th>
                    <th scope="col">decision</th>
                    <th scope="col">identity</th>
                    <th scope="col">route or action</th>
                    <th scope="col">reason</th>
                  </tr>
                </thead>
                <tbody>
                  {records.map((r) => (
                    <Row key={r.id} r={r} />
                  ))}
                </tbody>
              </table>
            </div>
            <ErrorNote error={olderError} what="older records" />
            {next ? (
              <p>
                <button type="button" onClick={readOlder}>
                  Older
                </button>
              </p>
            ) : null}
          </>
        )
      ) : d.loading ? (
        <p class="muted">Loading…</p>
      ) : null}
    </section>
  );
}
