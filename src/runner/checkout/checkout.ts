import { createWriteStream } from "node:fs";
import { mkdir, readdir, rm } from "node:fs/promises";
import { resolve } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { Client } from "@connectrpc/connect";
import type { RunnerService } from "../../../gen/forelead/runner/v1/runner_pb.js";
import { gitTimeouts, runGit } from "../../code/git.js";

/**
 * The runner refused to use code: the lease's identity is missing, or the import does not match it.
 */
export class CheckoutRefused extends Error {
  constructor(message: string) {
    super(message);
    this.name = "CheckoutRefused";
  }
}

/** A lease's code identity, as the claim reply gave it. */
export interface LeasedCode {
  readonly jobId: string;
  readonly leaseToken: string;
  readonly baseCommit: string;
  readonly baseTree: string;
}

/** Where and how to check out. */
export interface CheckoutOptions {
  /** A generated RunnerService client on the runner's mTLS transport. */
  readonly client: Client<typeof RunnerService>;
  /** An empty (or missing) directory: it becomes a git repository with the base checked out. */
  readonly dir: string;
  readonly signal?: AbortSignal;
}

const objectId = /^(?:[0-9a-f]{40}|[0-9a-f]{64})$/;

/**
 * Fetches the lease's base bundle over the protocol, imports it into a new
 * repository in `dir`, and checks out the base commit — but only after
 * `git rev-parse <baseCommit>^{tree}` equals the lease's baseTree. A lease
 * without a valid baseCommit and baseTree is refused before any request; a
 * tree that differs is refused before anything is checked out (the job must
 * not run on code other than what the control plane pinned).
 */
export async function checkoutBase(
  lease: LeasedCode,
  options: CheckoutOptions,
): Promise<{ commit: string; tree: string }> {
  if (!objectId.test(lease.baseCommit))
    throw new CheckoutRefused(
      `the lease of job ${lease.jobId} has no valid baseCommit; refusing to check out`,
    );
  if (!objectId.test(lease.baseTree))
    throw new CheckoutRefused(
      `the lease of job ${lease.jobId} has no valid baseTree; refusing to request a base bundle`,
    );
  await mkdir(options.dir, { recursive: true });
  if ((await readdir(options.dir)).length > 0)
    throw new CheckoutRefused(
      `${options.dir} is not empty; a base checkout needs an empty directory`,
    );
  await runGit(["init", "--quiet", options.dir], { timeoutMs: gitTimeouts.local });
  await importBundle(lease, "base", lease.baseCommit, options);
  const tree = await treeOf(options.dir, lease.baseCommit);
  if (tree !== lease.baseTree) {
    throw new CheckoutRefused(
      `base commit ${lease.baseCommit} has tree ${tree}, not the lease's ` +
        `baseTree ${lease.baseTree}; refusing to run job ${lease.jobId}`,
    );
  }
  await runGit(
    ["-c", "advice.detachedHead=false", "checkout", "--quiet", "--detach", lease.baseCommit],
    { cwd: options.dir, timeoutMs: gitTimeouts.bulk },
  );
  return { commit: lease.baseCommit, tree };
}

/**
 * Fetches a bundle of `kind` for `commit` and imports its objects into the
 * repository in `options.dir` (which must already hold the base commit for a
 * thin head or published bundle). Resolves to the commit's tree.
 */
export async function importBundle(
  lease: Pick<LeasedCode, "jobId" | "leaseToken">,
  kind: "base" | "head" | "published",
  commit: string,
  options: CheckoutOptions,
): Promise<string> {
  // Absolute: git runs with -C options.dir, and would resolve a relative bundle path from there.
  const file = resolve(options.dir, ".git", `forelead-${kind}.bundle`);
  try {
    const chunks = options.client.codeBundle(
      { apiVersion: "v1", jobId: lease.jobId, leaseToken: lease.leaseToken, kind, commit },
      { signal: options.signal },
    );
    await pipeline(
      Readable.from(
        (async function* () {
          for await (const c of chunks) yield c.data;
        })(),
      ),
      createWriteStream(file, { mode: 0o600 }),
    );
    await runGit(
      [
        "fetch",
        "--no-tags",
        "--quiet",
        "--no-write-fetch-head",
        file,
        `+refs/*:refs/forelead/${kind}/*`,
      ],
      { cwd: options.dir, timeoutMs: gitTimeouts.bulk },
    );
  } finally {
    await rm(file, { force: true });
  }
  return treeOf(options.dir, commit);
}

async function treeOf(dir: string, commit: string): Promise<string> {
  const { stdout, exitCode } = await runGit(
    ["rev-parse", "--verify", "--quiet", `${commit}^{tree}`],
    { cwd: dir, okExitCodes: [1, 128], timeoutMs: gitTimeouts.local },
  );
  if (exitCode !== 0)
    throw new CheckoutRefused(`the bundle does not hold commit ${commit}; refusing to run`);
  return stdout.trim();
}
