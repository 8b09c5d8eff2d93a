import { Code, ConnectError } from "@connectrpc/connect";
import type { Kysely } from "kysely";
import { checkJobId } from "../broker/ids.js";
import type { LeaseHolder } from "../broker/leases/check.js";
import type { Database } from "../store/schema.js";
import { checkArtifactName, checkDigest, checkMediaType } from "./names.js";
import type { StoredArtifact } from "./uploads.js";

/** Most artifacts one completion may list (the manifest also has to fit in a 1 MiB request). */
const maxManifestEntries = 4096;

/** A manifest entry as the runner sent it. */
export interface ManifestEntryInput {
  readonly name: string;
  readonly digest: string;
  readonly size: number | bigint;
  readonly mediaType: string;
}

/**
 * Checks a completion's result manifest: every entry a valid name (unique in
 * the manifest), and a digest finalized under this job's leases (any
 * attempt) with that very size. A digest uploaded by another job, even in
 * the same workspace, is refused: having bytes stored does not entitle a job
 * to claim them. Finalized uploads are never undone, so a manifest checked
 * here stays valid while the completion settles the job.
 */
export async function checkManifest(
  db: Kysely<Database>,
  holder: LeaseHolder,
  jobIdInput: string,
  entries: readonly ManifestEntryInput[],
): Promise<StoredArtifact[]> {
  if (entries.length === 0) return [];
  const jobId = checkJobId(jobIdInput);
  if (entries.length > maxManifestEntries)
    throw new ConnectError(
      `artifacts lists ${entries.length} entries; at most ${maxManifestEntries} are allowed`,
      Code.InvalidArgument,
    );
  const names = new Set<string>();
  const checked = entries.map((e, i) => {
    const name = checkArtifactName(e.name, `artifacts[${i}].name`);
    if (names.has(name))
      throw new ConnectError(
        `artifacts[${i}].name ${JSON.stringify(name)} appears twice in the manifest`,
        Code.InvalidArgument,
      );
    names.add(name);
    return {
      name,
      digest: checkDigest(e.digest, `artifacts[${i}].digest`),
      size: Number(e.size),
      mediaType: checkMediaType(e.mediaType, `artifacts[${i}].mediaType`),
    };
  });
  const digests = [...new Set(checked.map((e) => e.digest))];
  const rows = await db
    .selectFrom("uploads")
    .select(["digest", "size"])
    .distinct()
    .where("job_id", "=", jobId)
    .where("workspace_id", "=", holder.workspaceId)
    .where("state", "=", "finalized")
    .where("digest", "in", digests)
    .execute();
  const sizes = new Map(rows.map((r) => [r.digest, r.size]));
  checked.forEach((e, i) => {
    const size = sizes.get(e.digest);
    if (size === undefined) {
      throw new ConnectError(
        `artifacts[${i}] (${JSON.stringify(e.name)}) names ${e.digest}, which ` +
          `was not uploaded and finalized under a lease of job ${jobId}; upload it ` +
          `under this job first`,
        Code.FailedPrecondition,
      );
    }
    if (size !== e.size)
      throw new ConnectError(
        `artifacts[${i}] (${JSON.stringify(e.name)}) says ${e.size} bytes, but ${e.digest} holds ${size}`,
        Code.InvalidArgument,
      );
  });
  return checked;
}
