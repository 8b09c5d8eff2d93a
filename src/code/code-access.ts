import { Code, ConnectError } from "@connectrpc/connect";
import type { Kysely } from "kysely";
import { requireLiveLease, type LiveLease } from "../broker/leases/check.js";
import type { LeaseCall } from "../broker/leases/views.js";
import type { Database } from "../store/schema.js";
import { createBundleFile, type BundleFile } from "./bundles.js";
import type { KeyedQueue } from "./keyed-queue.js";
import { objectIdPattern, type Mirrors } from "./mirror.js";
import { findRepository, type RepositoryRow } from "./repositories.js";
import type { SecretBox } from "../secrets/box.js";

/** The bundle kinds of code/bundle. */
const bundleKinds = ["base", "head", "published"] as const;
/** One of bundleKinds. */
type BundleKind = (typeof bundleKinds)[number];

/** What the lease-scoped code routes need. */
export interface CodeAccessDeps {
  readonly db: Kysely<Database>;
  /** Opens repository credentials. */
  readonly secrets: SecretBox;
  readonly mirrors: Mirrors;
  /** One bundle per job and kind at a time: the bundle's ref is set, then read. */
  readonly bundleQueue: KeyedQueue;
  readonly maxBundleBytes: number;
  readonly scratchDir: string;
}

/** A code/bundle request, already decoded. */
export interface BundleRequest extends LeaseCall {
  readonly kind: string;
  readonly commit: string;
}

function refuse(message: string, code = Code.FailedPrecondition): never {
  throw new ConnectError(message, code);
}

/** The live lease of a job that has code (checkout or agent), with its repository. */
async function codeLease(
  deps: CodeAccessDeps,
  call: LeaseCall,
): Promise<{ lease: LiveLease; repo: RepositoryRow; branch: string }> {
  const lease = await requireLiveLease(deps.db, call, call.jobId, call.leaseToken);
  const job = lease.job;
  if (!job.repository || !job.target_branch)
    refuse(
      `job ${job.id} is a ${job.kind} job with no repository; code routes are for checkout and agent jobs`,
    );
  const repo = await findRepository(deps.db, deps.secrets, job.repository).catch(() =>
    refuse(
      `repository ${JSON.stringify(job.repository)} of job ${job.id} is no longer registered with this control plane`,
    ),
  );
  return { lease, repo, branch: job.target_branch };
}

function requireAgent(lease: LiveLease, what: string): void {
  if (lease.job.kind !== "agent")
    refuse(`${what} is only for agent jobs; job ${lease.job.id} is a ${lease.job.kind} job`);
}

/** code/head: the current commit of an agent job's target branch. */
export async function currentHead(deps: CodeAccessDeps, call: LeaseCall): Promise<string> {
  const { lease, repo, branch } = await codeLease(deps, call);
  requireAgent(lease, "code/head");
  return (await targetHead(deps, repo, branch)).commit;
}

async function targetHead(deps: CodeAccessDeps, repo: RepositoryRow, branch: string) {
  const head = await deps.mirrors.resolveBranch(repo, branch);
  if (!head)
    refuse(
      `branch ${JSON.stringify(branch)} no longer exists in repository ${JSON.stringify(repo.name)}`,
    );
  return head;
}

/**
 * code/bundle: a bundle of exactly the one commit the lease permits for the
 * kind — base: the pinned baseCommit; head: the agent job's current target
 * head; published: the agent job's durable published commit. `commit` must
 * equal it. Head and published bundles are thin on top of the base commit.
 * Every refusal says which rule it broke; all come before any byte is sent.
 */
export async function openBundle(deps: CodeAccessDeps, req: BundleRequest): Promise<BundleFile> {
  if (!bundleKinds.includes(req.kind as BundleKind)) {
    refuse(
      `kind ${JSON.stringify(req.kind.slice(0, 40))} is not a bundle kind; use "base", "head" or "published"`,
      Code.InvalidArgument,
    );
  }
  const kind = req.kind as BundleKind;
  if (!req.commit)
    refuse(`commit is required: the ${kind} commit the bundle is for`, Code.InvalidArgument);
  if (!objectIdPattern.test(req.commit))
    refuse(
      `commit ${JSON.stringify(req.commit.slice(0, 80))} is not a full commit id (40 or 64 lowercase hex digits)`,
      Code.InvalidArgument,
    );
  const { lease, repo, branch } = await codeLease(deps, req);
  const job = lease.job;
  const base = job.base_commit;
  if (!base) refuse(`job ${job.id} has no pinned base commit yet; claim it again`);
  let permitted: string;
  switch (kind) {
    case "base":
      permitted = base;
      if (req.commit !== permitted)
        refuse(
          `commit ${req.commit} is not the lease's base commit ${permitted}; a base bundle is only for the base commit`,
        );
      break;
    case "head":
      requireAgent(lease, "a head bundle");
      permitted = (await targetHead(deps, repo, branch)).commit;
      if (req.commit !== permitted)
        refuse(
          `commit ${req.commit} is not the current head ${permitted} of branch ` +
            `${JSON.stringify(branch)}; ask code/head again`,
          Code.Aborted,
        );
      break;
    case "published":
      requireAgent(lease, "a published bundle");
      if (!job.published_commit)
        refuse(
          `job ${job.id} has no published commit yet; publish one with POST /v1/runner/agent/publish first`,
        );
      permitted = job.published_commit;
      if (req.commit !== permitted)
        refuse(`commit ${req.commit} is not job ${job.id}'s published commit ${permitted}`);
      break;
  }
  const hints = [branch, ...(job.published_branch ? [job.published_branch] : [])];
  if (!(await deps.mirrors.ensureCommit(repo, permitted, hints))) {
    refuse(
      `commit ${permitted} is no longer available from repository ${JSON.stringify(repo.name)}`,
    );
  }
  const thinOnBase = kind !== "base" && (await deps.mirrors.ensureCommit(repo, base, hints));
  const mirror = await deps.mirrors.open(repo);
  const ref = `refs/forelead/jobs/${job.id}/${kind}`;
  return deps.bundleQueue.run(`${repo.name} ${ref}`, () =>
    createBundleFile({
      mirror,
      ref,
      commit: permitted,
      base: thinOnBase ? base : undefined,
      maxBytes: deps.maxBundleBytes,
      scratchDir: deps.scratchDir,
    }),
  );
}
