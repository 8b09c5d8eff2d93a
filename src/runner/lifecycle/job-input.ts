import { chmod, lstat, mkdir, readdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { Lease } from "../../../gen/forelead/runner/v1/job_pb.js";
import { looksSecret } from "../../protocol/secret-names.js";
import { jobDirParts } from "../executors/job-dir.js";

/**
 * The version of execution.json's shape (docs/job-contract.md); a change that is not additive gets
 * a new one.
 */
const executionSchema = "forelead.execution/v1";

/** A file the runner put under input/files/ for the job (pipelines' step outputs). */
interface ExecutionInput {
  /** Relative to input/, "/" separators: "files/build/app.tar". */
  readonly path: string;
  readonly size: number;
}

/**
 * /input/execution.json: the job's execution spec as the job reads it (docs/job-contract.md, field
 * by field).
 */
export interface ExecutionSpec {
  readonly schema: typeof executionSchema;
  readonly id: string;
  readonly attempt: number;
  readonly workspaceId: string;
  readonly runnerId: string;
  readonly executor: string;
  readonly labels: readonly string[];
  readonly kind: string;
  readonly argv: readonly string[];
  /**
   * spec.env, except variables whose names look secret (their values are withheld; the names are in
   * secretEnv).
   */
  readonly env: Readonly<Record<string, string>>;
  /**
   * Names of the env variables that carry secrets: the job's secrets and spec.env names that look
   * secret. Never a value.
   */
  readonly secretEnv: readonly string[];
  /** Names of the job's secret files, in FORELEAD_SECRETS_DIR. Never a content. */
  readonly secretFiles: readonly string[];
  readonly image: string;
  readonly limits: { readonly cpu: number; readonly memoryBytes: number };
  readonly timeoutSeconds: number;
  /** The code the job runs on, for checkout and agent jobs; null for a command job. */
  readonly repository: {
    readonly name: string;
    readonly targetBranch: string;
    readonly baseCommit: string;
    readonly baseTree: string;
  } | null;
  readonly inputs: readonly ExecutionInput[];
  /** Where the checkpoint of an earlier attempt lies (suspend and resume), or null. */
  readonly checkpoint: { readonly path: string } | null;
}

/**
 * The execution spec of `lease` on this runner; `inputs` and `checkpoint` as found under input/.
 */
function executionSpec(
  lease: Lease,
  runnerId: string,
  executor: string,
  found: { inputs: readonly ExecutionInput[]; checkpoint: boolean },
): ExecutionSpec {
  const job = lease.job!;
  const spec = job.spec;
  const specEnv = spec?.env ?? {};
  const env = Object.fromEntries(
    Object.entries(specEnv).filter(
      ([name]) => !looksSecret(name) && !Object.hasOwn(lease.secrets, name),
    ),
  );
  const secretEnv = [
    ...new Set([
      ...Object.keys(lease.secrets),
      ...Object.keys(specEnv).filter((name) => looksSecret(name)),
    ]),
  ].sort();
  return {
    schema: executionSchema,
    id: job.id,
    attempt: lease.attempt,
    workspaceId: job.workspaceId,
    runnerId,
    executor,
    labels: [...job.labels],
    kind: job.kind || "command",
    argv: [...(spec?.argv ?? [])],
    env,
    secretEnv,
    secretFiles: Object.keys(lease.secretFiles).sort(),
    image: spec?.image ?? "",
    limits: { cpu: spec?.cpu ?? 0, memoryBytes: Number(spec?.memoryBytes ?? 0n) },
    timeoutSeconds: spec?.timeoutSeconds ?? 0,
    repository: job.repository
      ? {
          name: job.repository,
          targetBranch: job.targetBranch,
          baseCommit: job.baseCommit,
          baseTree: job.baseTree,
        }
      : null,
    inputs: found.inputs,
    checkpoint: found.checkpoint ? { path: "checkpoint" } : null,
  };
}

/**
 * Makes the job's input directory, `jobDir/input`, and writes
 * `execution.json` into it; then makes the whole tree read-only to the job:
 * directories 0755 and files 0444, owned by the runner (the process
 * executor leaves input/ out when it gives the job directory to the job's
 * own user, and the container sees it bound read-only at /input). What other
 * steps put there before this call (input/files/, input/checkpoint/) is
 * listed in execution.json and protected the same way.
 */
export async function writeJobInput(
  jobDir: string,
  lease: Lease,
  runnerId: string,
  executor: string,
): Promise<ExecutionSpec> {
  const dir = join(jobDir, jobDirParts.input);
  await mkdir(dir, { recursive: true });
  const inputs = await listFiles(join(dir, "files"), "files");
  const checkpoint = await isDirectory(join(dir, "checkpoint"));
  const spec = executionSpec(lease, runnerId, executor, { inputs, checkpoint });
  await writeFile(join(dir, "execution.json"), `${JSON.stringify(spec, null, 2)}\n`, {
    mode: 0o444,
    flag: "wx",
  });
  await readOnlyTree(dir);
  return spec;
}

async function isDirectory(path: string): Promise<boolean> {
  return lstat(path).then(
    (s) => s.isDirectory(),
    () => false,
  );
}

/** Regular files under `dir` (the runner wrote them; links are not followed), as input paths. */
async function listFiles(dir: string, prefix: string): Promise<ExecutionInput[]> {
  const entries = await readdir(dir, { withFileTypes: true }).catch(() => []);
  const out: ExecutionInput[] = [];
  for (const entry of entries.sort((a, b) => (a.name < b.name ? -1 : 1))) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...(await listFiles(path, `${prefix}/${entry.name}`)));
    else if (entry.isFile())
      out.push({ path: `${prefix}/${entry.name}`, size: (await lstat(path)).size });
  }
  return out;
}

async function readOnlyTree(dir: string): Promise<void> {
  await chmod(dir, 0o755);
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) await readOnlyTree(path);
    else if (entry.isFile()) await chmod(path, 0o444);
  }
}
