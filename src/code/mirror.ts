import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import { withRemoteAccess, type GitRemote } from "./credentials.js";
import { GitError, gitTimeouts, runGit } from "./git.js";
import { createKeyedQueue } from "./keyed-queue.js";

/** A commit and its tree. */
interface PinnedCommit {
  readonly commit: string;
  readonly tree: string;
}

/** A registered repository as the mirror needs it. */
interface MirroredRepository extends GitRemote {
  readonly name: string;
}

/**
 * Local bare mirrors, one per repository, under one directory. The remote
 * URL is passed on every fetch (never stored as a remote), so a
 * re-registration takes effect at once. Fetches of one repository run one at
 * a time in this process (git would otherwise fail on ref locks); each
 * replica has its own mirrors. gc never runs in a mirror, so a pinned commit
 * stays available even after its branch was force-pushed away.
 */
export interface Mirrors {
  /** The mirror's directory (created on first use). */
  open(repo: MirroredRepository): Promise<string>;
  /** Fetches `branch` and returns its commit and tree; undefined when the branch does not exist. */
  resolveBranch(repo: MirroredRepository, branch: string): Promise<PinnedCommit | undefined>;
  /**
   * Makes sure `commit` is in the mirror, fetching `branches` (then the commit itself) when it is
   * not.
   */
  ensureCommit(
    repo: MirroredRepository,
    commit: string,
    branches: readonly string[],
  ): Promise<boolean>;
  /** Runs `fn` while no fetch of `repo` runs in this process. */
  exclusive<T>(repo: MirroredRepository, fn: () => Promise<T>): Promise<T>;
}

/** A full object name: SHA-1 (40 hex) or SHA-256 (64 hex). */
export const objectIdPattern = /^(?:[0-9a-f]{40}|[0-9a-f]{64})$/;

/**
 * Throws invalid_argument unless `branch` is a plain branch name git
 * accepts: no leading "-" (it would read as an option), no "..", no
 * control characters or spaces, no component starting with ".".
 */
export function checkBranchName(branch: string, field = "targetBranch"): string {
  const ok =
    /^[A-Za-z0-9_][A-Za-z0-9._/+@-]{0,199}$/.test(branch) &&
    !/\.\.|\/\/|@\{|\/\.|\.lock(\/|$)|[/.]$/.test(branch);
  if (!ok)
    throw new ConnectError(
      `${field} ${JSON.stringify(branch.slice(0, 80))} is not a branch name (e.g. "main" or "release/1.2")`,
      Code.InvalidArgument,
    );
  return branch;
}

/** Mirrors under `dir`. */
export function createMirrors(dir: string): Mirrors {
  const opened = new Map<string, Promise<string>>();
  const queue = createKeyedQueue();
  const exclusive = <T>(repo: MirroredRepository, fn: () => Promise<T>): Promise<T> =>
    queue.run(repo.name, fn);
  /** Resolves queued behind a running fetch, by repository and branch. */
  const waiting = new Map<string, Promise<PinnedCommit | undefined>>();

  const open = (repo: MirroredRepository): Promise<string> => {
    let p = opened.get(repo.name);
    if (!p) {
      const path = join(dir, `${repo.name}.git`);
      p = mkdir(dir, { recursive: true, mode: 0o700 })
        .then(() => runGit(["init", "--bare", "--quiet", path], { timeoutMs: gitTimeouts.local }))
        .then(() => path);
      p.catch(() => opened.delete(repo.name));
      opened.set(repo.name, p);
    }
    return p;
  };

  const fetch = async (repo: MirroredRepository, refspecs: readonly string[]): Promise<void> => {
    const cwd = await open(repo);
    await withRemoteAccess(repo, (access) =>
      runGit(
        ["fetch", "--no-tags", "--quiet", "--no-write-fetch-head", "--", repo.url, ...refspecs],
        { cwd, ...access },
      ),
    );
  };

  const hasCommit = async (cwd: string, commit: string): Promise<boolean> =>
    (
      await runGit(["cat-file", "-e", `${commit}^{commit}`], {
        cwd,
        okExitCodes: [1, 128],
        timeoutMs: gitTimeouts.local,
      })
    ).exitCode === 0;

  return {
    open,
    exclusive,
    resolveBranch(repo, branch) {
      // Coalesced: callers that arrive while a resolve of the same branch is queued but not yet
      // started share it (its fetch starts after all of them arrived, so each still sees the
      // branch as of after its own request). At most one runs and one waits per branch, so a
      // burst of claims or enqueues costs two fetches, not one each.
      const key = `${repo.name}\0${branch}`;
      const queued = waiting.get(key);
      if (queued) return queued;
      const resolved: Promise<PinnedCommit | undefined> = exclusive(repo, async () => {
        if (waiting.get(key) === resolved) waiting.delete(key);
        const ref = `refs/heads/${checkBranchName(branch)}`;
        try {
          await fetch(repo, [`+${ref}:${ref}`]);
        } catch (err) {
          if (err instanceof GitError && /couldn't find remote ref/i.test(err.stderr))
            return undefined;
          if (err instanceof GitError)
            throw new ConnectError(
              `repository ${JSON.stringify(repo.name)} could not be reached: ${err.message}`,
              Code.Unavailable,
            );
          throw err;
        }
        const { stdout } = await runGit(["rev-parse", `${ref}^{commit}`, `${ref}^{tree}`], {
          cwd: await open(repo),
          timeoutMs: gitTimeouts.local,
        });
        const [commit, tree] = stdout.trim().split("\n");
        return { commit: commit!, tree: tree! };
      });
      waiting.set(key, resolved);
      resolved.catch(() => waiting.get(key) === resolved && waiting.delete(key));
      return resolved;
    },
    async ensureCommit(repo, commit, branches) {
      if (!objectIdPattern.test(commit)) return false;
      const cwd = await open(repo);
      if (await hasCommit(cwd, commit)) return true;
      return exclusive(repo, async () => {
        for (const branch of branches) {
          const ref = `refs/heads/${branch}`;
          await fetch(repo, [`+${ref}:${ref}`]).catch(() => undefined);
          if (await hasCommit(cwd, commit)) return true;
        }
        // Servers that allow it hand out any reachable commit by id.
        await fetch(repo, [commit]).catch(() => undefined);
        return hasCommit(cwd, commit);
      });
    },
  };
}
