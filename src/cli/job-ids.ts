import type { Client } from "@connectrpc/connect";
import type { AdminService } from "../../gen/forelead/admin/v1/admin_pb.js";

/** A whole job id (a UUID): used as given. */
const wholeJobId = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** How many candidates an ambiguous short id's error names. */
const maxCandidates = 10;

/**
 * The job a person named: a whole id as given, or the one job whose id ends with a short id
 * (ListJobs idSuffix, where the rule of a short id lives: 8 or more characters). Throws naming
 * the candidates when several jobs end so, and when none does.
 */
export async function resolveJobId(
  admin: Client<typeof AdminService>,
  id: string,
): Promise<string> {
  if (wholeJobId.test(id)) return id;
  const { jobs } = await admin.listJobs({ idSuffix: id, pageSize: maxCandidates + 1 });
  if (jobs.length === 1) return jobs[0]!.id;
  if (jobs.length === 0) throw new Error(`no job id ends with ${JSON.stringify(id)}`);
  const named = jobs
    .slice(0, maxCandidates)
    .map((j) => `  ${j.id}  ${j.state}  ${j.workspaceId}`)
    .join("\n");
  throw new Error(
    `${JSON.stringify(id)} is the end of ${jobs.length > maxCandidates ? `more than ${maxCandidates}` : jobs.length} ` +
      `job ids; give more of the id:\n${named}`,
  );
}
