import { Code, ConnectError } from "@connectrpc/connect";
import type { Kysely } from "kysely";
import type { Database } from "../../store/schema.js";
import { requireLiveLease, type LeaseHolder } from "../leases/check.js";
import type { JobInputView, LeaseView } from "../leases/views.js";
import type { StepInputSpec } from "./graph.js";

/**
 * A glob over artifact names: `*` and `?` within a path segment, `**` across
 * segments ("dist/**" matches every file under dist/). Only these: names are
 * plain relative paths (src/artifacts/names.ts), and nothing else is special.
 */
function globMatcher(glob: string): (name: string) => boolean {
  let re = "";
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i]!;
    if (c === "*" && glob[i + 1] === "*") {
      re += glob[i + 2] === "/" ? "(?:.*/)?" : ".*";
      i += glob[i + 2] === "/" ? 2 : 1;
    } else if (c === "*") re += "[^/]*";
    else if (c === "?") re += "[^/]";
    else re += c.replace(/[.+^${}()|[\]\\]/g, "\\$&");
  }
  const pattern = new RegExp(`^${re}$`);
  return (name) => pattern.test(name);
}

/**
 * The inputs of a job that is a pipeline step's current job: for each of the
 * step's inputs, the artifacts of the named step's current job that match it
 * by name or glob, as that job's completion recorded them. Empty for any
 * other job. The one home of "which artifacts a job may read as inputs":
 * the lease lists them and DownloadInput serves only those.
 */
async function jobInputs(db: Kysely<Database>, jobId: string): Promise<JobInputView[]> {
  const step = await db
    .selectFrom("pipeline_steps")
    .select(["pipeline_id", "inputs"])
    .where("job_id", "=", jobId)
    .executeTakeFirst();
  const specs = (step?.inputs ?? []) as unknown as StepInputSpec[];
  if (!step || !specs.length) return [];
  return (await resolveInputs(db, step.pipeline_id, specs)).inputs;
}

/**
 * The step inputs `specs` of a step in `pipelineId` resolved against the needed steps' current
 * succeeded jobs' artifacts: the artifacts they name, and the specs that name none.
 */
async function resolveInputs(
  db: Kysely<Database>,
  pipelineId: string,
  specs: readonly StepInputSpec[],
): Promise<{ inputs: JobInputView[]; unmatched: StepInputSpec[] }> {
  const sources = await db
    .selectFrom("pipeline_steps as s")
    .innerJoin("jobs as j", "j.id", "s.job_id")
    .select(["s.name", "j.id", "j.artifacts"])
    .where("s.pipeline_id", "=", pipelineId)
    .where("s.name", "in", [...new Set(specs.map((i) => i.step))])
    .where("j.state", "=", "succeeded")
    .execute();
  const out = new Map<string, JobInputView>();
  const unmatched: StepInputSpec[] = [];
  for (const spec of specs) {
    const source = sources.find((s) => s.name === spec.step);
    const matches = spec.name ? (n: string) => n === spec.name : globMatcher(spec.glob);
    let matched = false;
    for (const a of (source?.artifacts ?? []) as Array<{
      name: string;
      digest: string;
      size: number | string;
    }>) {
      if (!matches(a.name)) continue;
      matched = true;
      out.set(`${spec.step}\n${a.name}`, {
        name: a.name,
        digest: a.digest,
        size: Number(a.size),
        fromStep: spec.step,
        fromJobId: source!.id,
      });
    }
    if (!matched) unmatched.push(spec);
  }
  return { inputs: [...out.values()], unmatched };
}

/**
 * The inputs of a step becoming ready that match no artifact and are not optional: each fails the
 * step (missing_input) rather than letting its job run without what it declared.
 */
export async function missingInputs(
  db: Kysely<Database>,
  pipelineId: string,
  specs: readonly StepInputSpec[],
): Promise<StepInputSpec[]> {
  const required = specs.filter((s) => !s.optional);
  if (!required.length) return [];
  return (await resolveInputs(db, pipelineId, required)).unmatched;
}

/**
 * A lease with its job's inputs (a claim reply of a pipeline step's job); any other lease as it is.
 */
export async function withInputs(db: Kysely<Database>, lease: LeaseView): Promise<LeaseView> {
  if (lease.pipelineStep === false) return lease; // the claim's row says it is no step's job
  const inputs = await jobInputs(db, String(lease.job.id));
  return inputs.length ? { ...lease, inputs } : lease;
}

/**
 * The input `name` of `fromJobId` that the live lease (`holder`, `jobId`,
 * `leaseToken`) may read: 409 for a lease that is not live, 404 when its job
 * names no such input, whatever artifacts exist.
 */
export async function leaseInput(
  db: Kysely<Database>,
  holder: LeaseHolder,
  jobId: string,
  leaseToken: string,
  fromJobId: string,
  name: string,
): Promise<JobInputView> {
  const live = await requireLiveLease(db, holder, jobId, leaseToken);
  const from = fromJobId.toLowerCase();
  const input = (await jobInputs(db, live.job.id)).find(
    (i) => i.fromJobId === from && i.name === name,
  );
  if (!input)
    throw new ConnectError(
      `job ${jobId} has no input ${JSON.stringify(name.slice(0, 200))} from ` +
        `job ${fromJobId.slice(0, 40)}; its lease lists the inputs it may read`,
      Code.NotFound,
    );
  return input;
}
