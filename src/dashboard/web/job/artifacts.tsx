// A settled job's artifacts (AdminService.ListJobArtifacts) and their download: the bytes come
// through the proxy by AdminService.DownloadArtifact (server streaming), are gathered into a Blob
// and saved under the artifact's name (its media type is the runner's word, so the file is
// saved as octet-stream, never opened in the page).
import { useState } from "preact/hooks";
import type { Artifact } from "../../../../gen/forelead/runner/v1/job_pb.js";
import { admin } from "../clients.js";
import { useData } from "../data.js";
import { ErrorNote } from "../errors.js";

function size(n: bigint): string {
  const v = Number(n);
  if (v >= 2 ** 20) return `${(v / 2 ** 20).toFixed(1)} MiB`;
  if (v >= 1024) return `${(v / 1024).toFixed(1)} KiB`;
  return `${v} B`;
}

async function download(jobId: string, a: Artifact): Promise<void> {
  const parts: Uint8Array<ArrayBuffer>[] = [];
  for await (const chunk of admin.downloadArtifact({ jobId, name: a.name }))
    parts.push(new Uint8Array(chunk.data));
  const url = URL.createObjectURL(new Blob(parts, { type: "application/octet-stream" }));
  const link = document.createElement("a");
  link.href = url;
  link.download = a.name.slice(a.name.lastIndexOf("/") + 1);
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

function Row({ jobId, a }: { jobId: string; a: Artifact }) {
  const [error, setError] = useState<unknown>(undefined);
  const [busy, setBusy] = useState(false);
  return (
    <tr data-artifact={a.name}>
      <th scope="row">
        <code>{a.name}</code>
      </th>
      <td>{size(a.size)}</td>
      <td>
        <code class="small" title={a.digest}>
          {a.digest.slice(0, 19)}…
        </code>
      </td>
      <td>
        <button
          type="button"
          disabled={busy}
          onClick={() => {
            setBusy(true);
            download(jobId, a)
              .then(() => setError(undefined), setError)
              .finally(() => setBusy(false));
          }}
        >
          {busy ? "Downloading…" : "Download"}
        </button>
        <ErrorNote error={error} what="download" />
      </td>
    </tr>
  );
}

export function Artifacts({ jobId, settled }: { jobId: string; settled: boolean }) {
  const list = useData(
    (signal) =>
      settled ? admin.listJobArtifacts({ jobId }, { signal }) : Promise.resolve(undefined),
    [jobId, settled],
  );
  if (!settled) return null;
  const artifacts = list.data?.artifacts ?? [];
  return (
    <section class="card" aria-labelledby="artifacts-title">
      <h2 id="artifacts-title">Artifacts</h2>
      <ErrorNote error={list.error} what="artifacts" />
      {list.data && artifacts.length === 0 ? <p class="muted">The job kept no artifacts.</p> : null}
      {artifacts.length > 0 ? (
        <div class="table-wrap">
          <table>
            <thead>
              <tr>
                <th scope="col">name</th>
                <th scope="col">size</th>
                <th scope="col">digest</th>
                <th scope="col">
                  <span class="sr-only">download</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {artifacts.map((a) => (
                <Row key={a.name} jobId={jobId} a={a} />
              ))}
            </tbody>
          </table>
        </div>
      ) : null}
    </section>
  );
}
