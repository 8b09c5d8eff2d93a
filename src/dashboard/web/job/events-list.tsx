// The events a job's runners sent, as a table: resource samples left out (the chart shows them),
// runs of one type folded into a row counting them ("job.progress ×37", fold-events.ts), and only
// the newest rows until the reader asks for all, so a chatty job cannot grow the page without end.
import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import { useState } from "preact/hooks";
import { Time } from "../time.js";
import { foldEvents, newestRows } from "./fold-events.js";

/** One event the runner sent, with its data. */
export interface ListedEvent {
  readonly position: string;
  readonly attempt: number;
  readonly receivedAt?: Date;
  readonly type: string;
  readonly data: JsonValue | undefined;
}

export function EventsList({ events }: { events: readonly ListedEvent[] }) {
  const [all, setAll] = useState(false);
  const rows = foldEvents(events);
  if (rows.length === 0) return <p class="muted">No events yet.</p>;
  const { shown, hidden } = newestRows(rows, all);
  return (
    <>
      {hidden > 0 ? (
        <p class="small events-more">
          Showing the newest {shown.length} of {rows.length} rows ({events.length} events).{" "}
          <button type="button" data-show-all-events onClick={() => setAll(true)}>
            Show all
          </button>
        </p>
      ) : null}
      <div class="table-wrap">
        <table class="job-events stack">
          <thead>
            <tr>
              <th scope="col">received</th>
              <th scope="col">attempt</th>
              <th scope="col">type</th>
              <th scope="col">data</th>
            </tr>
          </thead>
          <tbody>
            {shown.map(({ last: e, count }) => {
              const { type: _type, ...rest } = (e.data ?? {}) as JsonObject;
              return (
                <tr key={e.position} data-event-type={e.type} data-count={count}>
                  <td data-label="received">
                    <Time at={e.receivedAt} />
                  </td>
                  <td data-label="attempt">{e.attempt}</td>
                  <td data-label="type">
                    <code>{e.type}</code>
                    {count > 1 ? (
                      <span class="muted" title={`${count} in a row; the newest is shown`}>
                        {" "}
                        ×{count}
                      </span>
                    ) : null}
                  </td>
                  <td data-label="data">
                    <code class="small">
                      {Object.keys(rest).length ? JSON.stringify(rest) : ""}
                    </code>
                  </td>
                </tr>
              );
            })}
          </tbody>
        </table>
      </div>
    </>
  );
}
