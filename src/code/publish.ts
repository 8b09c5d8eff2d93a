import { createWriteStream } from "node:fs";
import { mkdir, mkdtemp, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { pipeline } from "node:stream/promises";
import { Readable } from "node:stream";
import { Code, ConnectError } from "@connectrpc/connect";
import { sql, type Kysely } from "kysely";
import { leaseRefusal, requireLiveLease } from "../broker/leases/check.js";
import { hashLeaseToken } from "../broker/ids.js";
import { liveLease } from "../broker/leases/sql-fragments.js";
import type { LeaseCall } from "../broker/leases/views.js";
import type { Database } from "../store/schema.js";
import { isAncestor } from "./bundles.js";
import { withRemoteAccess } from "./credentials.js";
import { GitError, gitTimeouts, runGit } from "./git.js";
import type { Mirrors } from "./mirror.js";
import { findRepository } from "./repositories.js";
import type { SecretBox } from "../secrets/box.js";

/** What publishing needs. */
export interface PublishDeps {
  readonly db: Kysely<Database>;
  /** Opens repository credentials. */
  readonly secrets: SecretBox;
  readonly mirrors: Mirrors;
  readonly scratchDir: string;
}

/** A published commit and the branch the control plane pushed it to. */
export interface Published {
  readonly commit: string;
  readonly branch: string;
}

/** The branch an agent job's commit is pushed to. */
function publishBranch(jobId: string): string {
  return `forelead/jobs/${jobId}`;
}

function refuse(message: string, code = Code.FailedPrecondition): never {
  throw new ConnectError(message, code);
}

/**
 * Publishes an agent job's commit. The bundle (`chunks`, already bounded by
 * the caller) is written to a private scratch repository that borrows the
 * mirror's objects, verified there (`git bundle verify`: complete, and its
 * prerequisites present), and must carry exactly one commit that descends
 * from the lease's base commit. Only then is it pushed, with the control
 * plane's credential, to `forelead/jobs/<jobId>` (forced: a later publish of
 * the same job replaces the earlier one) and recorded as the job's published
 * commit. Any refusal happens before the push: the repository is unchanged.
 */
export async function publishCommit(
  deps: PublishDeps,
  call: LeaseCall,
  chunks: AsyncIterable<Uint8Array>,
): Promise<Published> {
  const lease = await requireLiveLease(deps.db, call, call.jobId, call.leaseToken);
  const job = lease.job;
  if (job.kind !== "agent" || !job.repository || !job.target_branch)
    refuse(`publish is only for agent jobs; job ${job.id} is a ${job.kind} job`);
  const base = job.base_commit;
  if (!base) refuse(`job ${job.id} has no pinned base commit yet; claim it again`);
  const repo = await findRepository(deps.db, deps.secrets, job.repository);
  const mirror = await deps.mirrors.open(repo);
  if (!(await deps.mirrors.ensureCommit(repo, base, [job.target_branch])))
    refuse(
      `base commit ${base} is no longer available from repository ${JSON.stringify(repo.name)}`,
    );

  await mkdir(deps.scratchDir, { recursive: true, mode: 0o700 });
  const dir = await mkdtemp(join(deps.scratchDir, "publish-"));
  // git's messages about the bundle name its path: show the runner "the bundle", not our
  // directories.
  const tidy = (text: string) =>
    text
      .split(dir)
      .join("")
      .replace(/\/?in\.bundle/g, "the bundle");
  try {
    const file = join(dir, "in.bundle");
    await pipeline(Readable.from(chunks), createWriteStream(file, { mode: 0o600 }));
    if ((await stat(file)).size === 0)
      refuse(
        "the request body is empty; send a git bundle holding the commit to publish",
        Code.InvalidArgument,
      );
    const scratch = join(dir, "scratch.git");
    await runGit(["init", "--bare", "--quiet", scratch], { timeoutMs: gitTimeouts.local });
    await writeFile(join(scratch, "objects", "info", "alternates"), `${join(mirror, "objects")}\n`);

    const verified = await runGit(["bundle", "verify", "--quiet", file], {
      cwd: scratch,
      okExitCodes: [1, 128],
      timeoutMs: gitTimeouts.bulk,
    });
    if (verified.exitCode !== 0) {
      const why = tidy(verified.stderr).split("\n").slice(-2).join(" / ");
      refuse(
        `the bundle does not verify${why ? ` (${why})` : ""}; send a bundle made ` +
          `with git bundle create, thin on top of the base commit ${base} or whole`,
        Code.InvalidArgument,
      );
    }
    const heads = parseHeads(
      (await runGit(["bundle", "list-heads", file], { cwd: scratch, timeoutMs: gitTimeouts.local }))
        .stdout,
    );
    const commits = [...new Set(heads.map((h) => h.commit))];
    if (commits.length !== 1)
      refuse(
        `the bundle must carry exactly one commit; it carries ${commits.length}`,
        Code.InvalidArgument,
      );
    // The ref goes into a refspec: only plain ref names (no ":" or leading "-" can sneak in).
    if (!/^(?:HEAD|refs\/[A-Za-z0-9._/+@-]+)$/.test(heads[0]!.ref))
      refuse(
        `the bundle's ref ${JSON.stringify(heads[0]!.ref.slice(0, 100))} is not a plain ref name`,
        Code.InvalidArgument,
      );
    const commit = commits[0]!;
    // verify checks the header and prerequisites; a damaged pack shows only when git reads it here.
    const imported = await runGit(
      [
        "fetch",
        "--no-tags",
        "--quiet",
        "--no-write-fetch-head",
        file,
        `+${heads[0]!.ref}:refs/forelead/publish`,
      ],
      { cwd: scratch, okExitCodes: [1, 128], timeoutMs: gitTimeouts.bulk },
    );
    if (imported.exitCode !== 0)
      refuse(
        `the bundle's objects could not be read ` +
          `(${tidy(imported.stderr).split("\n").slice(-2).join(" / ")}); send an ` +
          `intact bundle`,
        Code.InvalidArgument,
      );
    const type = (
      await runGit(["cat-file", "-t", commit], { cwd: scratch, timeoutMs: gitTimeouts.local })
    ).stdout.trim();
    if (type !== "commit")
      refuse(`the bundle's ref points at a ${type}, not a commit`, Code.InvalidArgument);
    if (commit === base)
      refuse(
        `the bundle's commit is the base commit ${base} itself; publish a new commit on top of it`,
      );
    if (!(await isAncestor(scratch, base, commit)))
      refuse(
        `commit ${commit} does not descend from the lease's base commit ${base}; rebase it onto the base commit`,
      );

    // Checked again right before the push: nothing is pushed for a lease that died meanwhile.
    await requireLiveLease(deps.db, call, call.jobId, call.leaseToken);
    const branch = publishBranch(job.id);
    await withRemoteAccess(repo, (access) =>
      runGit(["push", "--force", "--quiet", "--", repo.url, `${commit}:refs/heads/${branch}`], {
        cwd: scratch,
        timeoutMs: gitTimeouts.bulk,
        ...access,
      }),
    ).catch((err: unknown) => {
      if (err instanceof GitError)
        refuse(
          `pushing commit ${commit} to repository ${JSON.stringify(repo.name)} failed: ${err.message}`,
          Code.Unavailable,
        );
      throw err;
    });
    await deps.mirrors.exclusive(repo, () =>
      runGit(
        [
          "fetch",
          "--no-tags",
          "--quiet",
          "--no-write-fetch-head",
          scratch,
          `+refs/forelead/publish:refs/forelead/jobs/${job.id}/published`,
        ],
        { cwd: mirror, timeoutMs: gitTimeouts.bulk },
      ),
    );
    await recordPublished(deps.db, { ...call, jobId: job.id }, commit, branch);
    return { commit, branch };
  } catch (err) {
    if (err instanceof GitError && err.timedOut)
      throw new ConnectError(
        `publishing did not finish within ${gitTimeouts.bulk / 1000} s (${err.message}); try again later`,
        Code.Unavailable,
      );
    throw err;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

function parseHeads(text: string): Array<{ commit: string; ref: string }> {
  return text
    .split("\n")
    .map((line) => /^([0-9a-f]{40,64}) (\S+)$/.exec(line.trim()))
    .filter((m): m is RegExpExecArray => m !== null)
    .map((m) => ({ commit: m[1]!, ref: m[2]! }));
}

/** Stores the published commit on the job, durably, while the lease is live. */
async function recordPublished(
  db: Kysely<Database>,
  call: LeaseCall,
  commit: string,
  branch: string,
): Promise<void> {
  const tokenHash = hashLeaseToken(call.leaseToken);
  const { rows } = await sql<{ id: string }>`
    update jobs set published_commit = ${commit}, published_branch = ${branch}, published_at = now(), updated_at = now()
    where ${liveLease({ jobId: call.jobId, workspaceId: call.workspaceId, runnerId: call.runnerId, token: tokenHash })}
    returning id`.execute(db);
  if (!rows[0]) throw await leaseRefusal(db, call, call.jobId, tokenHash);
}
